"""The threads under the async store API (alkstore/_offload.py, docs/adr/0025): a lane
runs one transaction's steps in order on one thread, results and exceptions come back
unchanged, the caller's context goes along, and at most `size` lanes are lent."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from alkstore import _offload

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class Boom(Exception):
    pass


def test_a_lane_runs_every_step_on_one_thread_in_order() -> None:
    async def main() -> None:
        lane = _offload.Lane()
        seen: list[tuple[int, int]] = []

        def step(n: int) -> int:
            seen.append((n, threading.get_ident()))
            return n * 2

        results = await asyncio.gather(*(lane.call(step, n) for n in range(50)))
        lane.stop()
        assert results == [n * 2 for n in range(50)]
        assert [n for n, _ in seen] == list(range(50))
        assert len({ident for _, ident in seen}) == 1
        assert seen[0][1] != threading.get_ident()  # not the loop's thread

    asyncio.run(main())


def test_exceptions_and_context_pass_through() -> None:
    async def main() -> None:
        offload, lane = _offload.Offload(2), _offload.Lane()
        raised = Boom("no")

        def fail() -> None:
            raise raised

        for call in (offload.call, lane.call):
            with pytest.raises(Boom) as caught:
                await call(fail)
            assert caught.value is raised
            request_id.set("r-42")
            assert await call(request_id.get) == "r-42"
            request_id.set("-")
        lane.stop()
        offload.close(wait=True)

    asyncio.run(main())


def test_lanes_lend_at_most_size_and_reuse_idle_ones() -> None:
    async def main() -> None:
        lanes = _offload.Lanes(2)
        first, second = await lanes.acquire(), await lanes.acquire()
        third = asyncio.create_task(lanes.acquire())
        await asyncio.sleep(0.01)
        assert not third.done()  # waits for a lane to come back
        lanes.release(second)
        assert await asyncio.wait_for(third, 5) is second  # the idle one, reused
        lanes.release(first)
        lanes.release(second)
        lanes.close()
        with pytest.raises(Exception, match="closed"):
            await lanes.acquire()

    asyncio.run(main())


def test_an_async_store_dropped_without_aclose_ends_its_threads(tmp_path: Any) -> None:
    import gc

    import alkstore

    store = alkstore.connect(f"sqlite:///{tmp_path / 'a.db'}")
    before = threading.active_count()
    astore = alkstore.AsyncStore(store, threads=3)
    assert threading.active_count() == before + 3
    del astore
    gc.collect()
    for _ in range(100):
        if threading.active_count() == before:
            break
        threading.Event().wait(0.01)
    assert threading.active_count() == before
    store.close()
