"""NATS JetStream (`nats-py`, `pip install 'alkstore[nats]'`; docs/adr/0026).

Each event is published to the subject its template names (default `{name}.{type}`)
with `Nats-Msg-Id: <namespace>:<position>`: within the stream's duplicate window
(2 minutes unless the stream says otherwise) JetStream stores a republished message
once and acknowledges it as a duplicate. A batch is pipelined on one connection
(`publish_async`: every message is written, then every acknowledgement awaited), so
the server stores them in publish order; the batch counts as confirmed up to the
first message without a positive acknowledgement. The stream is the operator's: the
sink never creates one. No stream for the subject, a message over the stream's or the
server's size limit, or any other 4xx refusal parks the subscription; a 5xx refusal,
a timeout or a lost connection is retried.

Headers: the envelope and the event's own headers, plus `Nats-Msg-Id` (and
`Nats-Expected-Stream` with the `stream` option: the message is refused, parking the
subscription, if another stream captures the subject). Body: the encoded event.
Options: `subject` (a template), `stream` (optional).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors

from relay.sinks import _base

log = logging.getLogger("alkstore.relay.sinks")
_BAD = re.compile(r"[\s*>]")  # not allowed inside a subject token


def _token(value: str) -> str:
    return _BAD.sub("_", value) or _base.NO_KEY


class NatsSink(_base.Sink):
    schemes = ("nats",)

    def __init__(self, url: str, options: dict[str, Any], namespace: str, name: str) -> None:
        super().__init__(url, options, namespace, name)
        subject = self.option("subject", "{name}.{type}", str)
        self.subject = _base.Template(subject, namespace, name, clean=_token)
        self.stream: str | None = self.option("stream", None, str)
        self.no_more_options()
        self._nc: Any = None
        self._js: Any = None

    async def connect(self) -> None:
        async def quiet(exc: Exception) -> None:
            log.debug("sink %r: nats: %s", self.name, exc)

        try:
            self._nc = await nats.connect(
                self.url,
                connect_timeout=2,
                allow_reconnect=False,  # the sink loop reconnects, after its backoff
                error_cb=quiet,
                max_reconnect_attempts=0,
            )
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            raise _base.unavailable(exc) from exc
        self._js = self._nc.jetstream(publish_async_max_pending=100_000)

    async def publish(self, messages: Sequence[_base.Message], timeout: float) -> int:
        assert self._js is not None, "connect() first"
        js, subject, stream = self._js, self.subject, self.stream
        acks: list[asyncio.Future[Any]] = []
        try:
            for m in messages:
                ack = await js.publish_async(
                    subject(m), m.body, headers={**m.headers, "Nats-Msg-Id": m.id}, stream=stream
                )
                acks.append(ack)
        except nats.errors.MaxPayloadError as exc:
            _cancel(acks)
            raise _base.rejected(f"over the server's max_payload: {exc}", len(acks)) from exc
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            _cancel(acks)  # the ones before may be stored: republished, dropped as duplicates
            raise _base.unavailable(exc) from exc
        except BaseException:
            _cancel(acks)
            raise
        return await _confirmed(acks, timeout, lambda i: subject(messages[i]))

    async def close(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None:
            try:
                await asyncio.wait_for(nc.close(), 2)
            except Exception:  # never raises: the connection is dropped either way
                pass


async def _confirmed(
    acks: list[asyncio.Future[Any]], timeout: float, subject: Callable[[int], str]
) -> int:
    """Await the acknowledgements in publish order (no callback of ours per message:
    a done one is just read): how many were duplicates, or SinkError with how many
    leading ones were positive."""
    dups, i = 0, 0
    try:
        async with asyncio.timeout(timeout):
            for i, ack in enumerate(acks):  # noqa: B007 (i: where it stopped)
                dups += bool((await ack).duplicate)
    except TimeoutError as exc:
        _cancel(acks)
        if acks[i].done() and not acks[i].cancelled() and acks[i].exception() is exc:
            raise _classify(exc, i, subject(i)) from exc  # the ack itself failed so
        raise _base.unavailable(TimeoutError(f"no acknowledgement in {timeout:.1f}s"), i) from exc
    except asyncio.CancelledError:
        _cancel(acks)
        raise
    except Exception as exc:
        _cancel(acks)
        raise _classify(exc, i, subject(i)) from exc
    return dups


def _cancel(acks: list[asyncio.Future[Any]]) -> None:
    for ack in acks:
        if not ack.done():
            ack.cancel()
        elif not ack.cancelled():
            ack.exception()  # retrieved: no "never retrieved" warning


def _classify(exc: BaseException, confirmed: int, subject: str) -> _base.SinkError:
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return _base.rejected(f"no JetStream stream captures subject {subject!r}", confirmed)
    if isinstance(exc, nats.js.errors.APIError) and (exc.code or 500) < 500:
        text = f"JetStream refused it ({exc.code}/{exc.err_code}): {exc.description}"
        return _base.rejected(text, confirmed)
    return _base.unavailable(exc, confirmed)
