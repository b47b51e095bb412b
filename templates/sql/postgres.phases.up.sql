-- Recovery points for PostgreSQL (runtime/pgstore, docs/semantics.md §8.2).
--
-- A migration of its own, applied after the key table's: a phase is kept
-- apart from the key's row, because it must outlive what ends that row (a
-- release deletes it; a transactional claim's rollback undoes it) and be
-- written while the handler's transaction holds the row. Applying this
-- file twice is harmless.

-- One row per phase of one request: (tenant, scope, key) is the request's
-- row identity, name the phase's. The first record stands; a second is
-- refused by the primary key and reads the first.
CREATE TABLE IF NOT EXISTS idempotency_phases (
    tenant     text        NOT NULL,
    scope      text        NOT NULL,
    key        text        NOT NULL,
    name       text        NOT NULL,
    result     bytea       NOT NULL,
    -- The phase lives the operation's ttl from its record; the sweeper
    -- deletes it after that, with the expired keys.
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, scope, key, name)
);

CREATE INDEX IF NOT EXISTS idempotency_phases_expires_at_idx
    ON idempotency_phases (expires_at);
