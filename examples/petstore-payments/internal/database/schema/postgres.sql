-- The payments service's business tables. Applied once at start, before the
-- idempotency migrations, and recorded in schema_migrations.

CREATE TABLE IF NOT EXISTS accounts (
    tenant          text        NOT NULL,
    id              text        NOT NULL,
    seq             bigserial   NOT NULL,
    owner           text        NOT NULL,
    currency        text        NOT NULL,
    balance         bigint      NOT NULL CHECK (balance >= 0),
    initial_balance bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE IF NOT EXISTS transfers (
    tenant       text        NOT NULL,
    id           text        NOT NULL,
    seq          bigserial   NOT NULL,
    from_account text        NOT NULL,
    to_account   text        NOT NULL,
    amount       bigint      NOT NULL CHECK (amount > 0),
    currency     text        NOT NULL,
    memo         text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, from_account) REFERENCES accounts (tenant, id),
    FOREIGN KEY (tenant, to_account) REFERENCES accounts (tenant, id)
);

CREATE INDEX IF NOT EXISTS transfers_from_idx ON transfers (tenant, from_account, seq);
CREATE INDEX IF NOT EXISTS transfers_to_idx ON transfers (tenant, to_account, seq);

CREATE TABLE IF NOT EXISTS pets (
    tenant     text        NOT NULL,
    id         text        NOT NULL,
    name       text        NOT NULL,
    species    text        NOT NULL,
    status     text        NOT NULL CHECK (status IN ('available', 'adopted')),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE IF NOT EXISTS adoptions (
    tenant     text        NOT NULL,
    id         text        NOT NULL,
    pet_id     text        NOT NULL,
    account_id text        NOT NULL,
    fee        bigint      NOT NULL CHECK (fee >= 0),
    currency   text        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, id),
    -- A pet is adopted once, whatever the application code does.
    UNIQUE (tenant, pet_id),
    FOREIGN KEY (tenant, pet_id) REFERENCES pets (tenant, id),
    FOREIGN KEY (tenant, account_id) REFERENCES accounts (tenant, id)
);
