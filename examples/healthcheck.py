"""`python -m examples.healthcheck [--db URL] [--namespace NS] [--max-lag S] [--max-wait S]`

A namespace-wide health check on the public API, for a monitoring job, a systemd timer or
a container's health check (docs/guide/deploying.md). One line per check; exit 0 when
all pass, 1 when one fails, 2 when the database cannot be used.

- the database answers and alkstore's tables are up to date (`store.check()`);
- a relay holds the relay lease (it renews it at least every `--lease-ttl / 3`);
- no subscription has an event older than `--max-lag` seconds waiting to be relayed;
- no queue (those with a subscription, and each `--queue Q`: queues fed by `tx.enqueue`)
  has had a job ready for longer than `--max-wait` seconds (nobody consumes it, or too
  few do);
- dead letters are counted, not failed on: whether one is an alarm is yours to say.
"""

from __future__ import annotations

import argparse

import alkstore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.healthcheck")
    parser.add_argument("--db", help="default: $ALKSTORE_DB, else sqlite:///alkstore.db")
    parser.add_argument("--namespace", help="default: $ALKSTORE_NAMESPACE, else alkstore")
    parser.add_argument("--max-lag", type=float, default=60.0, help="seconds (default: 60)")
    parser.add_argument("--max-wait", type=float, default=300.0, help="seconds (default: 300)")
    parser.add_argument("--queue", action="append", default=[], help="a queue to check too")
    args = parser.parse_args(argv)
    try:
        store = alkstore.connect(args.db, namespace=args.namespace)
        store.check()
    except alkstore.AlkstoreError as exc:
        print(f"FAIL database: {exc}")
        return 2
    failed = False

    def report(ok: bool, what: str) -> None:
        nonlocal failed
        failed = failed or not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}")

    with store:
        now = store.now()
        holder = store.lease("relay", ttl=1).holder_info()  # reads the row, takes nothing
        if holder is None or holder[2].timestamp() <= now:
            report(False, "relay: no process holds the relay lease")
        else:
            report(True, f"relay: {holder[0]} holds the lease (token {holder[1]})")
        status = store.status()
        for lag in status.subscriptions:
            behind = lag.seconds or 0.0
            report(
                behind <= args.max_lag,
                f"{lag.queue}: {lag.events} events to relay, oldest {behind:.1f}s",
            )
        for queue in [lag.queue for lag in status.subscriptions] + args.queue:
            stats = store.queue(queue).stats()
            waited = stats.oldest_ready_age or 0.0
            report(
                waited <= args.max_wait,
                f"{queue}: {stats.ready} ready (oldest {waited:.1f}s), {stats.scheduled} "
                f"scheduled, {stats.active} running, {stats.dead} dead letters",
            )
        if status.oldest_appender is not None:  # PostgreSQL: its events wait for its commit
            holdup = status.oldest_appender
            report(True, f"oldest open appending transaction: pid {holdup.pid}, {holdup.age:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
