"""Processes built on alkstore's public API: relay, scheduler, worker runtime and the CLI."""

from relay import metrics
from relay._handlers import Fail, Retry, Snooze
from relay._relay import Relay
from relay._scheduler import Scheduler
from relay.worker import Worker, WorkerCrashed

__all__ = ["Fail", "Relay", "Retry", "Scheduler", "Snooze", "Worker", "WorkerCrashed", "metrics"]
