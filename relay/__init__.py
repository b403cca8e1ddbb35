"""Processes built on alkstore's public API: the CLI now; relay, worker and scheduler next."""

__all__: list[str] = []
