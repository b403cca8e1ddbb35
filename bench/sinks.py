"""Broker sink benchmark (docs/adr/0026): events/s from the log into each broker against a
plain client publishing the same messages, and commit -> broker-visible latency.

Run it from the repository root with the local brokers up (about 2 minutes):

    python bench/sinks.py [--engines sqlite,postgres] [--brokers redis,nats,rabbitmq]
                          [--events 20000] [--batch 1000] [--reps 3] [--samples 200]
                          [--interval 0.02] [--json results.json]

On each engine and broker, in one run:

1. throughput: `--events` events (bench.order_placed, 16-60 byte payloads) are appended
   up front. The relay: a sink subscription from the beginning into a fresh
   destination, fed by `relay.sinks.SinkLoop.step()` (batch `--batch`, its lease held).
   The plain client: the same messages (envelope, headers, body, built untimed from the
   log) published by the broker's own client with the same confirmation, in batches of
   `--batch`, into a destination of its own: Redis, a non-transactional pipeline of
   XADD with the same entry ids; NATS, `publish_async` with Nats-Msg-Id, then every
   acknowledgement; RabbitMQ, aio-pika publishes with publisher confirms, mandatory,
   gathered. The two alternate in slices: one relay step (up to 8 batches), then the
   plain client publishing exactly what that step published; the first slice (both
   connect) is not counted. events/s = events / summed time per side; each repetition
   uses fresh destinations. Target: relay / plain >= 0.8 (median of the repetitions).
   Also printed: CPU µs per event on each side (the process' CPU time over the same
   slices, both of the relay's threads), which a loaded machine disturbs far less than
   the rates: it tells the relay's own work from waiting.
2. latency: a relay runs as its own process (`python -m relay.cli relay`, as in
   production); `--samples` events (0: none, no latency run) `--interval` s apart, each
   appended in its own transaction. The time starts when the commit returned and ends
   when a consumer of the destination in this process received it (Redis: XREAD BLOCK;
   NATS: an ordered JetStream push consumer; RabbitMQ: basic.consume). p50 and p99.

SQLite runs on a file in a temp directory, PostgreSQL on a throwaway database
(bench/_common.py). Every destination is created by the benchmark and deleted after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aio_pika
import nats
import redis.asyncio as aioredis

import alkstore
from bench._common import OrderPlaced, cli_process, make_backend, percentile, tail_of
from relay.sinks import Message, SinkLoop, envelope

REDIS = "redis://127.0.0.1:6379/0"
NATS = "nats://127.0.0.1:4222"
AMQP = "amqp://guest:guest@127.0.0.1:5672/"
PATTERNS = ["bench.*"]


class Destination:
    """A fresh stream / queue on one broker; `options` for `subscribe_sink`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.tag = uuid.uuid4().hex[:8]
        self.url = {"redis": REDIS, "nats": NATS, "rabbitmq": AMQP}[kind]
        if kind == "redis":
            self.name = f"bench-{self.tag}"
            self.options: dict[str, Any] = {"stream": self.name}
        elif kind == "nats":
            self.name = f"BENCH_{self.tag}"
            self.subject = f"bench.{self.tag}"
            self.options = {"subject": self.subject + ".{type}", "stream": self.name}
        else:
            self.name = f"bench-{self.tag}"
            self.options = {"routing_key": self.name}

    async def create(self) -> None:
        if self.kind == "nats":
            nc = await nats.connect(NATS)
            await nc.jsm().add_stream(name=self.name, subjects=[self.subject + ".>"])
            await nc.close()
        elif self.kind == "rabbitmq":
            conn = await aio_pika.connect(AMQP)
            await (await conn.channel()).declare_queue(self.name, durable=True)
            await conn.close()

    async def count(self) -> int:
        if self.kind == "redis":
            r = aioredis.Redis.from_url(REDIS)
            n = int(await r.xlen(self.name))
            await r.aclose()
            return n
        if self.kind == "nats":
            nc = await nats.connect(NATS)
            info = await nc.jsm().stream_info(self.name)
            await nc.close()
            return int(info.state.messages)
        conn = await aio_pika.connect(AMQP)
        queue = await (await conn.channel()).declare_queue(self.name, passive=True)
        await conn.close()
        return int(queue.declaration_result.message_count or 0)

    async def delete(self) -> None:
        if self.kind == "redis":
            r = aioredis.Redis.from_url(REDIS)
            await r.delete(self.name)
            await r.aclose()
        elif self.kind == "nats":
            nc = await nats.connect(NATS)
            await nc.jsm().delete_stream(self.name)
            await nc.close()
        else:
            conn = await aio_pika.connect(AMQP)
            await (await conn.channel()).queue_delete(self.name)
            await conn.close()


# -- the plain clients ---------------------------------------------------------------------


class Plain:
    """The broker's own client publishing the same messages, with the same confirmation,
    `batch` at a time, on a connection opened once (as the relay's is)."""

    def __init__(self, dest: Destination, batch: int) -> None:
        self.dest = dest
        self.batch = batch
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._connect())

    async def _connect(self) -> None:
        if self.dest.kind == "redis":
            self.redis = aioredis.Redis.from_url(REDIS)
            await self.redis.ping()
        elif self.dest.kind == "nats":
            self.nc = await nats.connect(NATS)
            self.js = self.nc.jetstream(publish_async_max_pending=100_000)
        else:
            self.conn = await aio_pika.connect(AMQP)
            channel = await self.conn.channel(publisher_confirms=True, on_return_raises=True)
            self.exchange = channel.default_exchange

    def publish(self, messages: list[Message]) -> None:
        for i in range(0, len(messages), self.batch):
            self.loop.run_until_complete(self._publish(messages[i : i + self.batch]))

    async def _publish(self, chunk: list[Message]) -> None:
        dest = self.dest
        if dest.kind == "redis":
            pipe = self.redis.pipeline(transaction=False)
            for m in chunk:
                fields: dict[Any, Any] = {
                    k: v for k, v in m.headers.items() if k.startswith("alk-")
                }
                fields["alk-headers"] = b"{}"
                fields["payload"] = m.body
                pipe.xadd(dest.name, fields, id=f"{m.position}-0")
            await pipe.execute()
        elif dest.kind == "nats":
            acks = []
            for m in chunk:
                headers = {**m.headers, "Nats-Msg-Id": m.id}
                subject = f"{dest.subject}.{m.type}"
                acks.append(
                    await self.js.publish_async(subject, m.body, headers=headers, stream=dest.name)
                )
            await asyncio.gather(*acks)
        else:
            await asyncio.gather(
                *(
                    self.exchange.publish(
                        aio_pika.Message(
                            m.body,
                            headers=dict(m.headers),
                            message_id=m.id,
                            type=m.type,
                            content_type="application/json",
                            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        ),
                        routing_key=dest.name,
                        mandatory=True,
                    )
                    for m in chunk
                )
            )

    def close(self) -> None:
        async def close() -> None:
            if self.dest.kind == "redis":
                await self.redis.aclose()
            elif self.dest.kind == "nats":
                await self.nc.close()
            else:
                await self.conn.close()

        self.loop.run_until_complete(close())
        self.loop.close()


# -- 1. throughput -----------------------------------------------------------------------


def paired_rep(
    store: alkstore.Store, kind: str, messages: dict[int, Message], batch: int
) -> tuple[float, float, float, float]:
    """One repetition: (relay events/s, plain events/s, relay CPU µs per event, plain CPU
    µs per event: the process' CPU time, both threads), in alternating slices. A slice
    is one `SinkLoop.step()` (up to 8 batches read ahead), then the plain client
    publishing exactly the messages that step published into a destination of its own.
    The first slice (both connect) is not counted."""
    ours, theirs = Destination(kind), Destination(kind)
    asyncio.run(ours.create())
    asyncio.run(theirs.create())
    try:
        store.subscribe_sink("bench", ours.url, PATTERNS, start="beginning", **ours.options)
        lease = store.lease("relay", ttl=60)
        assert lease.acquire()
        loop = SinkLoop(store, lease, batch=batch)
        plain = Plain(theirs, batch)
        head, done, counted = store.log.head(), 0, 0
        relay_time = plain_time = relay_cpu = plain_cpu = 0.0
        first = True
        while done < head:
            cpu, started = time.process_time(), time.perf_counter()
            loop.step()
            relayed = time.perf_counter() - started
            relayed_cpu = time.process_time() - cpu
            assert loop.retries == 0, "a publish failed"
            reached = store.sink_subscriptions()[0].checkpoint
            chunk = [messages[p] for p in range(done + 1, reached + 1) if p in messages]
            cpu, started = time.process_time(), time.perf_counter()
            plain.publish(chunk)
            published = time.perf_counter() - started
            published_cpu = time.process_time() - cpu
            if not first:
                relay_time += relayed
                plain_time += published
                relay_cpu += relayed_cpu
                plain_cpu += published_cpu
                counted += len(chunk)
            first, done = False, reached
        loop.close()
        plain.close()
        lease.release()
        store.unsubscribe("bench")
        for dest in (ours, theirs):
            got = asyncio.run(dest.count())
            assert got == len(messages), f"{kind}: {got} of {len(messages)} arrived"
        if not counted:
            raise SystemExit("--events must exceed 8 x --batch: the first slice is not counted")
        per = 1e6 / counted
        return counted / relay_time, counted / plain_time, relay_cpu * per, plain_cpu * per
    finally:
        asyncio.run(ours.delete())
        asyncio.run(theirs.delete())


def throughput(store: alkstore.Store, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    messages = {e.position: envelope(store.namespace, e) for e in _events(store)}
    relay_rates, plain_rates, relay_cpu, plain_cpu = [], [], [], []
    for _ in range(args.reps):
        ours, theirs, ours_cpu, theirs_cpu = paired_rep(store, kind, messages, args.batch)
        relay_rates.append(ours)
        plain_rates.append(theirs)
        relay_cpu.append(ours_cpu)
        plain_cpu.append(theirs_cpu)
    ratios = [r / p for r, p in zip(relay_rates, plain_rates, strict=True)]
    return {
        "relay_events_per_s": statistics.median(relay_rates),
        "plain_events_per_s": statistics.median(plain_rates),
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "relay_cpu_us": statistics.median(relay_cpu),
        "plain_cpu_us": statistics.median(plain_cpu),
    }


def _events(store: alkstore.Store) -> list[alkstore.SinkEvent]:
    feed = store.sink_feed()
    store.subscribe_sink("probe", REDIS, PATTERNS, start="beginning")
    found: list[alkstore.SinkEvent] = []
    low = 0
    while low < store.log.head():
        batch = feed.batch(None, "probe", 5_000)
        found += batch.events
        feed.advance(None, "probe", batch.low, batch.high)
        low = batch.high
    store.unsubscribe("probe")
    return found


# -- 2. latency --------------------------------------------------------------------------


class Consumer:
    """Receives the destination's messages in this process; `seen[order_id]` = when."""

    def __init__(self, dest: Destination) -> None:
        self.dest = dest
        self.seen: dict[int, float] = {}
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    def _got(self, body: bytes) -> None:
        self.seen[int(json.loads(body)["order_id"])] = time.perf_counter()

    async def _start(self) -> None:
        if self.dest.kind == "redis":
            self.task = asyncio.ensure_future(self._redis())
        elif self.dest.kind == "nats":
            self.nc = await nats.connect(NATS)
            js = self.nc.jetstream()

            async def on(msg: Any) -> None:
                self._got(msg.data)

            self.sub = await js.subscribe(self.dest.subject + ".>", cb=on, ordered_consumer=True)
        else:
            self.conn = await aio_pika.connect(AMQP)
            queue = await (await self.conn.channel()).get_queue(self.dest.name)

            async def on_amqp(msg: aio_pika.abc.AbstractIncomingMessage) -> None:
                self._got(msg.body)

            await queue.consume(on_amqp, no_ack=True)

    async def _redis(self) -> None:
        r = aioredis.Redis.from_url(REDIS)
        last = "0-0"
        while True:
            reply: Any = await r.xread({self.dest.name: last}, block=1000)
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    self._got(fields[b"payload"])
                    last = entry_id.decode()

    def wait(self, order_id: int, timeout: float) -> float:
        deadline = time.perf_counter() + timeout
        while order_id not in self.seen:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"event {order_id} did not arrive in {timeout} s")
            time.sleep(0.0002)
        return self.seen[order_id]

    def close(self) -> None:
        async def stop() -> None:
            if self.dest.kind == "redis":
                self.task.cancel()
            elif self.dest.kind == "nats":
                await self.sub.unsubscribe()
                await self.nc.close()
            else:
                await self.conn.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def latency(backend: Any, kind: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    dest = Destination(kind)
    asyncio.run(dest.create())
    log_path = workdir / f"relay-{backend.name}-{kind}.log"
    samples = []
    with backend.connect("bench_sinks_latency") as store:
        store.migrate()
        store.subscribe_sink("lat", dest.url, PATTERNS, start="now", **dest.options)
        consumer = Consumer(dest)
        cli = ["relay", "--db", backend.url, "--namespace", store.namespace]
        try:
            with cli_process(cli, log_path):
                for i in range(args.samples + 20):  # the first 20: warm-up
                    with store.transaction() as tx:
                        tx.append(OrderPlaced(order_id=i))
                    committed = time.perf_counter()
                    try:
                        arrived = consumer.wait(i, 30 if i == 0 else 5)
                    except TimeoutError as exc:
                        raise RuntimeError(f"{exc}; relay log:\n{tail_of(log_path)}") from exc
                    if i >= 20:
                        samples.append(arrived - committed)
                    time.sleep(args.interval)
        finally:
            consumer.close()
            store.unsubscribe("lat")
            asyncio.run(dest.delete())
    return {
        "p50_ms": percentile(samples, 50) * 1000,
        "p99_ms": percentile(samples, 99) * 1000,
        "max_ms": max(samples) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--brokers", default="redis,nats,rabbitmq")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    workdir = Path(__import__("tempfile").mkdtemp(prefix="alkstore_bench_sinks_"))
    for engine in args.engines.split(","):
        backend = make_backend(engine)
        try:
            with backend.connect("bench_sinks") as store:
                store.migrate()
                for start in range(0, args.events, 5_000):
                    with store.transaction() as tx:
                        tx.append_many(
                            [
                                OrderPlaced(order_id=i, total_cents=i)
                                for i in range(start, min(start + 5_000, args.events))
                            ]
                        )
                for kind in args.brokers.split(","):
                    row = throughput(store, kind, args)
                    seen = "commit->visible: not measured (--samples 0)"
                    if args.samples > 0:
                        row.update(latency(backend, kind, args, workdir))
                        seen = (
                            f"commit->visible p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms"
                        )
                    results[f"{engine}/{kind}"] = row
                    print(
                        f"{engine:8} {kind:8} relay {row['relay_events_per_s']:9,.0f} ev/s  "
                        f"plain {row['plain_events_per_s']:9,.0f} ev/s  ratio {row['ratio']:.2f} "
                        f"({', '.join(f'{r:.2f}' for r in row['ratios'])})  CPU/event "
                        f"{row['relay_cpu_us']:.1f} / {row['plain_cpu_us']:.1f} µs  {seen}",
                        flush=True,
                    )
        finally:
            backend.close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
