"""A key at its limit does not hide the other keys' jobs (docs/adr/0021, addendum).

A claim of a queue with a key limit or a key rate looks at a bounded number of
candidates in claim order (`_ordering.KEY_SCAN`, 8 per job asked for). The jobs of a key
that is already at its limit are not among them: before, a hot key with more waiting
jobs than that scan filled it, and a claim found nothing although other keys had jobs
ready (found by tests/contract/test_limits_model.py: a key rate of 1, nine jobs of one
key, one of another, claims of one job).
"""

from __future__ import annotations

from typing import Any

from tests.clock import Clock

START = 1_700_000_000.0


def test_a_key_over_its_rate_does_not_hide_another_key(backend: Any) -> None:
    clock = Clock(START)
    with backend.migrated(clock=clock) as store:
        q = store.queue("q")
        q.configure(key_rate_limit=1, rate_period=60)
        hot = [q.enqueue(i, group="hot") for i in range(20)]
        cold = q.enqueue("cold", group="cold")
        first = q.claim_many(1)
        assert [j.id for j in first] == [hot[0]]
        second = q.claim_many(1)  # "hot" used its one start of the period
        assert [j.id for j in second] == [cold]


def test_a_key_at_its_concurrency_does_not_hide_another_key(backend: Any) -> None:
    clock = Clock(START)
    with backend.migrated(clock=clock) as store:
        q = store.queue("q")
        q.configure(key_concurrency=2)
        hot = [q.enqueue(i, group="hot") for i in range(40)]
        cold = [q.enqueue(i, group="cold") for i in range(2)]
        plain = q.enqueue("no key")
        first = q.claim_many(2)
        assert [j.id for j in first] == hot[:2]
        rest = q.claim_many(3)  # "hot" runs two: its 38 others are passed over
        assert [j.id for j in rest] == [*cold, plain]
