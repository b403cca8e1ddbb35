"""Where the sink tests publish, and how they read back what arrived (docs/adr/0026).

A `Target` is one broker destination a test creates for itself (a Redis stream, a
JetStream stream, a RabbitMQ queue) and removes at the end; `received()` returns every
message it holds, in broker order, as `Got` (the envelope read back from the broker's
own headers or fields).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec

from tests import brokers


@dataclass(frozen=True)
class Got:
    id: str
    type: str
    key: str | None
    position: int
    headers: dict[str, str]  # the event's own headers (trace context), not the envelope
    body: bytes
    appended_at: str


class Target:
    kind: str
    url: str
    options: dict[str, Any]
    dedupes: bool  # the broker drops a message it already has (same id)

    def received(self) -> list[Got]:
        raise NotImplementedError

    def refuse(self) -> None:
        """Make the broker refuse this destination's messages for good."""
        raise NotImplementedError

    def accept(self) -> None:
        """Undo `refuse`."""
        raise NotImplementedError

    def cleanup(self) -> None:
        raise NotImplementedError


def _got(fields: dict[str, str], own: dict[str, str], body: bytes) -> Got:
    return Got(
        fields["alk-id"],
        fields["alk-type"],
        fields.get("alk-key"),
        int(fields["alk-position"]),
        own,
        body,
        fields["alk-appended-at"],
    )


class RedisTarget(Target):
    kind = "redis"
    dedupes = True

    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        self.stream = f"alktest-{uuid.uuid4().hex[:10]}"
        self.options = {"stream": self.stream}
        self.client = redis.Redis.from_url(url)

    def received(self) -> list[Got]:
        found = []
        entries: list[tuple[bytes, dict[bytes, bytes]]] = self.client.xrange(self.stream)  # type: ignore[assignment]
        for entry_id, raw in entries:
            fields = {k.decode(): v for k, v in raw.items()}
            text = {k: v.decode() for k, v in fields.items() if k != "payload"}
            assert entry_id.decode() == f"{text['alk-position']}-0"
            own = msgspec.json.decode(fields["alk-headers"], type=dict[str, str])
            found.append(_got(text, own, fields["payload"]))
        return found

    def refuse(self) -> None:
        self.client.set(self.stream, "not a stream")  # XADD: WRONGTYPE

    def accept(self) -> None:
        self.client.delete(self.stream)

    def cleanup(self) -> None:
        self.client.delete(self.stream)
        self.client.close()


class NatsTarget(Target):
    """A JetStream stream of its own, capturing `<prefix>.>`."""

    kind = "nats"
    dedupes = True

    def __init__(self, url: str) -> None:
        self.url = url
        tag = uuid.uuid4().hex[:10]
        self.stream = f"ALKTEST_{tag}"
        self.prefix = f"alktest.{tag}"
        self.options = {"subject": self.prefix + ".{type}", "stream": self.stream}
        self.accept()

    async def _jsm(self) -> Any:
        import nats

        nc = await nats.connect(self.url, connect_timeout=2)
        return nc, nc.jsm()

    def received(self) -> list[Got]:
        async def read() -> list[Got]:
            nc, jsm = await self._jsm()
            try:
                info = await jsm.stream_info(self.stream)
                found = []
                for seq in range(info.state.first_seq, info.state.last_seq + 1):
                    msg = await jsm.get_msg(self.stream, seq)
                    headers = dict(msg.headers or {})
                    assert headers.pop("Nats-Msg-Id") == headers["alk-id"]
                    assert headers.pop("Nats-Expected-Stream") == self.stream
                    assert msg.subject.startswith(self.prefix + ".")
                    own = {k: v for k, v in headers.items() if not k.startswith("alk-")}
                    found.append(_got(headers, own, msg.data or b""))
                return found
            finally:
                await nc.close()

        return brokers.run(read())

    def refuse(self) -> None:
        self.cleanup()  # no stream captures the subject

    def accept(self) -> None:
        async def create() -> None:
            nc, jsm = await self._jsm()
            try:
                await jsm.add_stream(name=self.stream, subjects=[self.prefix + ".>"])
            finally:
                await nc.close()

        brokers.run(create())

    def cleanup(self) -> None:
        async def delete() -> None:
            import nats.js.errors

            nc, jsm = await self._jsm()
            try:
                await jsm.delete_stream(self.stream)
            except nats.js.errors.NotFoundError:
                pass
            finally:
                await nc.close()

        brokers.run(delete())


class RabbitTarget(Target):
    """A queue of its own, fed through the default exchange (routing key = its name)."""

    kind = "rabbitmq"
    dedupes = False

    def __init__(self, url: str) -> None:
        self.url = url
        self.queue = f"alktest-{uuid.uuid4().hex[:10]}"
        self.options = {"routing_key": self.queue}
        self.accept()

    async def _channel(self) -> Any:
        import aio_pika

        connection = await aio_pika.connect(self.url, timeout=5)
        return connection, await connection.channel()

    def received(self) -> list[Got]:
        """Everything in the queue, in order (requeued: it can be read again)."""

        async def read() -> list[Got]:
            connection, channel = await self._channel()
            try:
                queue = await channel.get_queue(self.queue)
                found, held = [], []
                while (msg := await queue.get(fail=False, no_ack=False)) is not None:
                    held.append(msg)
                    headers = {k: str(v) for k, v in (msg.headers or {}).items()}
                    assert msg.message_id == headers["alk-id"] and msg.type == headers["alk-type"]
                    own = {k: v for k, v in headers.items() if not k.startswith("alk-")}
                    found.append(_got(headers, own, msg.body))
                for msg in held:
                    await msg.nack(requeue=True)
                return found
            finally:
                await connection.close()

        return brokers.run(read())

    def refuse(self) -> None:
        self.cleanup()  # the default exchange has no route for it: returned

    def accept(self) -> None:
        async def declare() -> None:
            connection, channel = await self._channel()
            try:
                await channel.declare_queue(self.queue, durable=True)
            finally:
                await connection.close()

        brokers.run(declare())

    def cleanup(self) -> None:
        async def delete() -> None:
            connection, channel = await self._channel()
            try:
                await channel.queue_delete(self.queue)
            finally:
                await connection.close()

        brokers.run(delete())


@contextmanager
def target(kind: str, url: str | None = None) -> Iterator[Target]:
    """A fresh destination on the local broker of `kind` (or the one at `url`)."""
    made: Target
    if kind == "redis":
        made = RedisTarget(url or brokers.require(brokers.REDIS_URL, 6379, "Redis"))
    elif kind == "nats":
        made = NatsTarget(url or brokers.require(brokers.NATS_URL, 4222, "NATS"))
    elif kind == "rabbitmq":
        made = RabbitTarget(url or brokers.require(brokers.AMQP_URL, 5672, "RabbitMQ"))
    else:
        raise ValueError(kind)
    try:
        yield made
    finally:
        made.cleanup()
