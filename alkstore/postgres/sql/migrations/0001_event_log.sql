-- The event log. Appenders insert rows with position NULL; a sequencer assigns
-- positions after commit, in the order rows became visible, under an advisory
-- lock that only sequencers take (docs/adr/0004-commit-order-on-postgresql.md).
CREATE TABLE {ns}.events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    position    bigint,
    type        text NOT NULL,
    key         text,
    headers     jsonb,
    payload     jsonb NOT NULL,
    appended_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE UNIQUE INDEX events_position ON {ns}.events (position) WHERE position IS NOT NULL;
CREATE INDEX events_unsequenced ON {ns}.events (id) WHERE position IS NULL;

-- The last position handed out. One row; only the sequencer updates it.
CREATE TABLE {ns}.log_head (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    head      bigint NOT NULL
);
INSERT INTO {ns}.log_head (head) VALUES (0);

-- Give committed, unsequenced events the next positions, oldest id first.
-- Serialised by a transaction-level advisory lock, so position order is the
-- order in which the sequencer saw events committed: a reader at "after p"
-- can never later find a committed event at a position <= p.
CREATE FUNCTION {ns}.sequence_events(batch integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    base bigint;
    n integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('alkstore'), hashtext('{ns}.sequence_events'));
    -- New statements see everything committed before the lock was granted.
    SELECT head INTO base FROM {ns}.log_head;
    WITH todo AS (
        SELECT id, row_number() OVER (ORDER BY id) AS rn
        FROM {ns}.events
        WHERE position IS NULL
        ORDER BY id
        LIMIT batch
    )
    UPDATE {ns}.events AS e SET position = base + todo.rn
    FROM todo WHERE e.id = todo.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE {ns}.log_head SET head = base + n;
    END IF;
    RETURN n;
END
$$;
