"""The worker runtime, one part per job (docs/adr/0008-worker.md, 0012):

- `_runtime`: the Worker (handlers, run/stop, shutdown, its threads);
- `_dispatch`: one claim loop per queue (prefetch, starting jobs as slots free up);
- `_outcomes`: running a handler and settling its job, whatever way it ends;
- `_leases`: renewing every held lease in one statement, on a connection of its own,
  and recording the starts of prefetched jobs that run long;
- `_acks`: batched acks;
- `_inflight`: what is held, keyed by (job id, lease token); `_slots`: capacity.
"""

from relay.worker._runtime import Worker, WorkerCrashed

__all__ = ["Worker", "WorkerCrashed"]
