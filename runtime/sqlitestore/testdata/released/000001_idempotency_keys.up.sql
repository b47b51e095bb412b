-- Idempotency keys for SQLite (runtime/sqlitestore).
--
-- Applying this file twice is harmless: every object is created with
-- IF NOT EXISTS. The columns mirror the PostgreSQL table, with SQLite's
-- types: times are INTEGER unix milliseconds read from the store's clock,
-- booleans are 0 or 1, and the replayable headers are kept as a BLOB of
-- length-prefixed bytes, so that every header value replays byte for byte.

-- One row per (tenant, scope, key): the primary key is the UNIQUE
-- constraint that makes a key mean one request. This is an ordinary rowid
-- table rather than WITHOUT ROWID because a row can carry a stored response
-- body of up to a megabyte, far beyond what WITHOUT ROWID tables suit.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant       TEXT    NOT NULL,
    -- The operation ID for scope "operation", '' for scope "tenant".
    scope        TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    operation    TEXT    NOT NULL,
    -- SHA-256 of the request's canonical form.
    fingerprint  BLOB    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state IN ('in_flight', 'completed', 'indeterminate')),
    -- Only the holder of lease_token may complete, release or abandon the
    -- row (fencing); a takeover replaces it.
    lease_token  TEXT,
    -- Unix milliseconds; NULL once the row is completed.
    lease_until  INTEGER,
    -- 1 when the claim that holds the row fails closed: once its lease runs
    -- out the row becomes indeterminate, whatever the lease-expiry mode of
    -- the claim that meets it. A claim committed before its handler runs
    -- (durable mode) may leave effects behind, and the next process to meet
    -- it, after a restart, may not know that.
    fail_closed  INTEGER NOT NULL DEFAULT 0 CHECK (fail_closed IN (0, 1)),
    expires_at   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    completed_at INTEGER,
    status       INTEGER,
    headers      BLOB,
    body         BLOB,
    -- 1 when the body was larger than the policy's snapshot limit: the
    -- record is completed without it and replays answer 409.
    body_omitted INTEGER NOT NULL DEFAULT 0 CHECK (body_omitted IN (0, 1)),
    PRIMARY KEY (tenant, scope, key)
);

-- The sweeper finds expired rows through this index.
CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at_idx
    ON idempotency_keys (expires_at);
