-- The transactional outbox for PostgreSQL (runtime/idemoutbox/pgoutbox),
-- in the schema of pgstore's idempotency_keys.
--
-- Applying this file twice is harmless: every object is created with
-- IF NOT EXISTS. It is a migration of its own, apart from the key table's:
-- a service that stages no effects never needs it.
--
-- Effects a handler stages in its key's transaction (an e-mail, a webhook,
-- any message), delivered afterwards by a runner: a row exists if and only
-- if the request's writes committed. docs/outbox.md tells the whole story.
CREATE TABLE IF NOT EXISTS idempotency_outbox (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The request's key as stored (idempotency_keys' primary key), so that
    -- an operator finds a key's effects.
    tenant          text        COLLATE "C" NOT NULL,
    scope           text        COLLATE "C" NOT NULL,
    key             text        COLLATE "C" NOT NULL,
    -- The effect key (idem.EffectKey) the receiver is given.
    effect_key      text        COLLATE "C" NOT NULL,
    name            text        NOT NULL,
    payload         bytea       NOT NULL,
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'dead')),
    -- Deliveries begun, counted when a runner claims the row, so that one
    -- that kills its runner every time still ends dead.
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- A runner's claim: until leased_until no other runner takes the row,
    -- after it (the runner died or hangs) any may. lease_token fences the
    -- record of a failure to the claim that made it.
    leased_until    timestamptz,
    lease_token     text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    delivered_at    timestamptz
);

-- A request stages one effect per name: a second pending effect with the
-- same effect key is refused. Delivered and dead rows do not count, so a
-- key reused after it expired stages its effects anew.
CREATE UNIQUE INDEX IF NOT EXISTS idempotency_outbox_pending_key_idx
    ON idempotency_outbox (tenant, effect_key) WHERE state = 'pending';

-- Runners find due rows through this index.
CREATE INDEX IF NOT EXISTS idempotency_outbox_due_idx
    ON idempotency_outbox (next_attempt_at) WHERE state = 'pending';

-- Metrics count what is not delivered through this one.
CREATE INDEX IF NOT EXISTS idempotency_outbox_undelivered_idx
    ON idempotency_outbox (state, created_at) WHERE state <> 'delivered';

-- Runners find what is past keeping through this one.
CREATE INDEX IF NOT EXISTS idempotency_outbox_delivered_idx
    ON idempotency_outbox (delivered_at) WHERE state = 'delivered';

-- Operators find a key's effects through this one.
CREATE INDEX IF NOT EXISTS idempotency_outbox_request_idx
    ON idempotency_outbox (tenant, scope, key);
