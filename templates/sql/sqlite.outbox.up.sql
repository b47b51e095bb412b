-- The transactional outbox for SQLite (runtime/idemoutbox/sqliteoutbox),
-- in the database of sqlitestore's idempotency_keys.
--
-- Applying this file twice is harmless: every object is created with
-- IF NOT EXISTS. It is a migration of its own, apart from the key table's:
-- a service that stages no effects never needs it.
--
-- Effects a handler stages in its key's transaction (an e-mail, a webhook,
-- any message), delivered afterwards by a runner: a row exists if and only
-- if the request's writes committed. The columns mirror PostgreSQL's; times
-- are unix milliseconds. docs/outbox.md tells the whole story.
CREATE TABLE IF NOT EXISTS idempotency_outbox (
    id              INTEGER PRIMARY KEY,
    -- The request's key as stored, so that an operator finds its effects.
    tenant          TEXT    NOT NULL,
    scope           TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    -- The effect key (idem.EffectKey) the receiver is given.
    effect_key      TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'dead')),
    -- Deliveries begun, counted when a runner claims the row.
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    -- A runner's claim: until leased_until no other runner takes the row.
    leased_until    INTEGER,
    lease_token     TEXT,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER
);

-- A request stages one effect per name (see the PostgreSQL schema).
CREATE UNIQUE INDEX IF NOT EXISTS idempotency_outbox_pending_key_idx
    ON idempotency_outbox (tenant, effect_key) WHERE state = 'pending';

CREATE INDEX IF NOT EXISTS idempotency_outbox_due_idx
    ON idempotency_outbox (next_attempt_at) WHERE state = 'pending';

CREATE INDEX IF NOT EXISTS idempotency_outbox_undelivered_idx
    ON idempotency_outbox (state, created_at) WHERE state <> 'delivered';

CREATE INDEX IF NOT EXISTS idempotency_outbox_delivered_idx
    ON idempotency_outbox (delivered_at) WHERE state = 'delivered';

CREATE INDEX IF NOT EXISTS idempotency_outbox_request_idx
    ON idempotency_outbox (tenant, scope, key);
