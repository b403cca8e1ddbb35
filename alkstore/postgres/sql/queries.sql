-- Named queries of the PostgreSQL engine. {ns} is the namespace schema.

-- name: lock_migrations
SELECT pg_advisory_xact_lock(hashtext('alkstore'), hashtext('{ns}.migrate'))

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {ns}

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS {ns}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: migrations_table_exists
SELECT to_regclass('{ns}.schema_migrations') IS NOT NULL

-- name: applied_versions
SELECT version FROM {ns}.schema_migrations ORDER BY version

-- name: schema_version
SELECT max(version) FROM {ns}.schema_migrations

-- name: record_migration
INSERT INTO {ns}.schema_migrations (version, name) VALUES (%s, %s)

-- name: insert_event
INSERT INTO {ns}.events (type, key, headers, payload) VALUES (%s, %s, %s::jsonb, %s::jsonb)

-- name: append_event
-- Prepared on libpq by store transactions (alkstore/postgres/_conn.py): $n placeholders.
INSERT INTO {ns}.events (type, key, headers, payload) VALUES ($1, $2, $3::jsonb, $4::jsonb)

-- name: copy_events
-- tx.append_many of many events (docs/adr/0013).
COPY {ns}.events (type, key, headers, payload) FROM STDIN

-- name: sequence_events
SELECT {ns}.sequence_events(%s)

-- name: read_events
SELECT position, type, key, headers::text, payload::text, appended_at
FROM {ns}.events
WHERE position > %s
ORDER BY position
LIMIT %s

-- name: head
SELECT head FROM {ns}.log_head

-- name: notify
SELECT pg_notify('__alkstore_{ns}', '')

-- name: listen
LISTEN __alkstore_{ns}

-- name: now_fragment
-- `{now}` in every query: the injected test clock's `now`, else the server's clock at the
-- start of the statement (ADR 0012).
coalesce(%(now)s::bigint, (extract(epoch FROM statement_timestamp()) * 1000)::bigint)

-- name: db_now
SELECT {now}

-- name: up_for_lease_fragment
-- A lapsed lease may be taken from its holder only once the server has been up for the
-- lease's length: a restart must not cost a live holder its job (ADR 0012). An injected
-- test clock (`now` given) skips the rule.
(%(now)s::bigint IS NOT NULL
 OR {now} - (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint >= lease_ms)
