"""Processes built on alkstore's public API: the relay loop and the CLI (workers and the
scheduler come next)."""

from relay._relay import Relay

__all__ = ["Relay"]
