"""RabbitMQ over AMQP 0-9-1 (`aio-pika`, `pip install 'alkstore[rabbitmq]'`; ADR 0026).

aio-pika rather than pika: pika's blocking channel in confirm mode waits for each
message's confirmation before sending the next (one round trip per event), and its
callback connection would put a second event model into the relay; aio-pika (on
aiormq, both maintained, 2026 releases) pipelines publishes on one channel with
publisher confirms, on the same asyncio loop as the NATS and Redis clients.

Each event is published on one channel in publisher-confirm mode, `mandatory`: to
`exchange` (default: the default exchange) with the routing key its template names
(default `{name}`, so the default exchange routes it to the queue of that name). The
channel is one ordered stream of frames, so a queue receives them in log order; the
batch counts as confirmed up to the first message not acked. RabbitMQ does not
deduplicate: a message republished after a crash (or a replay) arrives again with the
same `message_id` (`<namespace>:<position>`), which consumers deduplicate on.

Properties: `message_id`, `type` (the event type), `content_type` application/json,
persistent delivery (option `persistent`, default true); headers: the envelope and the
event's own headers; body: the encoded event. An unroutable message (returned), a
missing exchange (404) or a message over the broker's size limit (406) parks the
subscription; a nack, a timeout or a lost connection is retried.
Options: `exchange`, `routing_key` (a template), `persistent`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aio_pika
import aiormq.exceptions as amqp

from relay.sinks import _base


class RabbitSink(_base.Sink):
    schemes = ("amqp", "amqps")

    def __init__(self, url: str, options: dict[str, Any], namespace: str, name: str) -> None:
        super().__init__(url, options, namespace, name)
        self.exchange_name: str = self.option("exchange", "", str)
        self.routing_key = _base.Template(
            self.option("routing_key", "{name}", str), namespace, name
        )
        persistent = self.option("persistent", True, bool)
        self.delivery = (
            aio_pika.DeliveryMode.PERSISTENT if persistent else aio_pika.DeliveryMode.NOT_PERSISTENT
        )
        self.no_more_options()
        self._connection: Any = None
        self._exchange: Any = None

    async def connect(self) -> None:
        try:
            self._connection = await aio_pika.connect(self.url, timeout=2)
            channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
            if self.exchange_name:
                self._exchange = await channel.get_exchange(self.exchange_name, ensure=True)
            else:
                self._exchange = channel.default_exchange
        except amqp.ChannelNotFoundEntity as exc:
            await self.close()
            raise _base.rejected(f"no exchange {self.exchange_name!r}: {exc}", 0) from exc
        except (OSError, TimeoutError, amqp.AMQPError) as exc:
            await self.close()
            raise _base.unavailable(exc) from exc

    async def publish(self, messages: Sequence[_base.Message], timeout: float) -> int:
        assert self._exchange is not None, "connect() first"
        sends = [
            asyncio.ensure_future(
                self._exchange.publish(
                    aio_pika.Message(
                        m.body,
                        headers=dict(m.headers),
                        message_id=m.id,
                        type=m.type,
                        content_type="application/json",
                        delivery_mode=self.delivery,
                    ),
                    routing_key=self.routing_key(m),
                    mandatory=True,
                    timeout=timeout,
                )
            )
            for m in messages
        ]
        await asyncio.wait(sends, timeout=timeout)
        for i, send in enumerate(sends):
            if not send.done():
                _cancel(sends)
                raise _base.unavailable(TimeoutError(f"no confirmation in {timeout:.1f}s"), i)
            failure = send.exception()
            if failure is not None:
                _cancel(sends)
                raise _classify(failure, i, self.routing_key(messages[i])) from failure
        return 0  # RabbitMQ does not tell (nor drop) duplicates

    async def close(self) -> None:
        connection, self._connection, self._exchange = self._connection, None, None
        if connection is not None:
            try:
                await asyncio.wait_for(connection.close(), 2)
            except Exception:  # never raises: the connection is dropped either way
                pass


def _cancel(sends: list[asyncio.Future[Any]]) -> None:
    for send in sends:
        if not send.done():
            send.cancel()
        elif not send.cancelled():
            send.exception()  # retrieved: no "never retrieved" warning


def _classify(exc: BaseException, confirmed: int, routing_key: str) -> _base.SinkError:
    if isinstance(exc, amqp.PublishError):  # returned: no queue is bound for it
        return _base.rejected(f"unroutable (no queue bound for {routing_key!r}): {exc}", confirmed)
    if isinstance(exc, amqp.ChannelNotFoundEntity | amqp.ChannelPreconditionFailed):
        return _base.rejected(f"RabbitMQ refused it: {exc}", confirmed)
    if isinstance(exc, amqp.ChannelAccessRefused):
        return _base.rejected(f"RabbitMQ refused access: {exc}", confirmed)
    return _base.unavailable(exc, confirmed)
