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

-- name: schema_state
-- Does the namespace's schema exist, and its schema_migrations table? (migrate creates only
-- what is missing: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the
-- schema is there.)
SELECT to_regnamespace('{ns}') IS NOT NULL, to_regclass('{ns}.schema_migrations') IS NOT NULL

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
-- NOTIFY assigns an xid, so it commits: a wake hint needs no WAL flush. set_config(...,
-- true) is SET LOCAL: it holds for this statement's transaction (whose commit reads it)
-- and never stays on the session, which a pooler may hand to others (docs/adr/0020).
SELECT pg_notify('__alkstore_{ns}', ''), set_config('synchronous_commit', 'off', true)

-- name: listen
LISTEN __alkstore_{ns}

-- name: listen_probe
-- A NOTIFY the LISTEN thread sends itself after LISTEN: no answer, no wakes (docs/adr/0020).
SELECT pg_notify('__alkstore_{ns}', %(token)s)

-- name: session_probe
-- At connect: the server's pid for this session (a pooler gives the client another one)
-- and the isolation level sessions start with (docs/adr/0020).
SELECT pg_backend_pid(), current_setting('default_transaction_isolation')

-- name: read_committed
-- On a directly connected session only (never through a pooler): the sequencer relies on
-- each statement seeing everything committed before it (ADR 0004).
SET default_transaction_isolation TO 'read committed'

-- name: now_fragment
-- `{now}` in every query: the injected test clock's `now`, else the server's clock at the
-- start of the statement (ADR 0012). A scalar sub-select, an InitPlan computed once per
-- statement: as an expression it was computed for every row written (extract() is
-- numeric arithmetic, ~0.15 us a time: a claim of 100 jobs paid it 100 times, an
-- enqueue_many row three times).
(SELECT coalesce(%(now)s::bigint, (extract(epoch FROM statement_timestamp()) * 1000)::bigint))

-- name: db_now
SELECT {now}

-- name: up_for_lease_fragment
-- A lapsed lease may be taken from its holder only once the server has been up for the
-- lease's length: a restart must not cost a live holder its job (ADR 0012). An injected
-- test clock (`now` given) skips the rule.
(%(now)s::bigint IS NOT NULL
 OR {now} - (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint >= lease_ms)
