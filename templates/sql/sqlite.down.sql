-- Drops everything sqlite.up.sql creates. The stored keys go with it:
-- after this, every key is new again.
DROP INDEX IF EXISTS idempotency_keys_expires_at_idx;
DROP TABLE IF EXISTS idempotency_keys;
