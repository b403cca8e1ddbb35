"""The PostgreSQL engine (psycopg 3): post-commit sequencing, LISTEN/NOTIFY wakes."""

from alkstore.postgres._engine import PostgresEngine
from alkstore.postgres._owned import append_on, append_on_async, enqueue_on, enqueue_on_async

__all__ = ["PostgresEngine", "append_on", "append_on_async", "enqueue_on", "enqueue_on_async"]
