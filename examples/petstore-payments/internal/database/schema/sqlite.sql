-- The payments service's business tables. Applied once at start, before the
-- idempotency migrations, and recorded in schema_migrations. Times are
-- RFC 3339 text in UTC; rows keep their implicit rowid, which orders them by
-- insertion.

CREATE TABLE IF NOT EXISTS accounts (
    tenant          TEXT    NOT NULL,
    id              TEXT    NOT NULL,
    owner           TEXT    NOT NULL,
    currency        TEXT    NOT NULL,
    balance         INTEGER NOT NULL CHECK (balance >= 0),
    initial_balance INTEGER NOT NULL,
    created_at      TEXT    NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE IF NOT EXISTS transfers (
    tenant       TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    from_account TEXT    NOT NULL,
    to_account   TEXT    NOT NULL,
    amount       INTEGER NOT NULL CHECK (amount > 0),
    currency     TEXT    NOT NULL,
    memo         TEXT    NOT NULL DEFAULT '',
    created_at   TEXT    NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, from_account) REFERENCES accounts (tenant, id),
    FOREIGN KEY (tenant, to_account) REFERENCES accounts (tenant, id)
);

CREATE INDEX IF NOT EXISTS transfers_from_idx ON transfers (tenant, from_account);
CREATE INDEX IF NOT EXISTS transfers_to_idx ON transfers (tenant, to_account);

CREATE TABLE IF NOT EXISTS pets (
    tenant     TEXT NOT NULL,
    id         TEXT NOT NULL,
    name       TEXT NOT NULL,
    species    TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('available', 'adopted')),
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE IF NOT EXISTS adoptions (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    pet_id     TEXT    NOT NULL,
    account_id TEXT    NOT NULL,
    fee        INTEGER NOT NULL CHECK (fee >= 0),
    currency   TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, pet_id),
    FOREIGN KEY (tenant, pet_id) REFERENCES pets (tenant, id),
    FOREIGN KEY (tenant, account_id) REFERENCES accounts (tenant, id)
);
