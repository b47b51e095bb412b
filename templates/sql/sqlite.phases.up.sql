-- Recovery points for SQLite (runtime/sqlitestore, docs/semantics.md §8.2).
--
-- A migration of its own, applied after the key table's: a phase is kept
-- apart from the key's row, because it must outlive what ends that row (a
-- release deletes it). Times are INTEGER unix milliseconds from the
-- store's clock, as in the key table. Applying this file twice is harmless.

-- One row per phase of one request: (tenant, scope, key) is the request's
-- row identity, name the phase's. The first record stands.
CREATE TABLE IF NOT EXISTS idempotency_phases (
    tenant     TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    result     BLOB    NOT NULL,
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, scope, key, name)
);

CREATE INDEX IF NOT EXISTS idempotency_phases_expires_at_idx
    ON idempotency_phases (expires_at);
