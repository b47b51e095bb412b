-- Drops everything postgres.up.sql creates. The stored keys go with it:
-- after this, every key is new again.
DROP FUNCTION IF EXISTS idempotency_sweep(integer);
DROP FUNCTION IF EXISTS idempotency_complete(text, text, text, text, integer, bytea, bytea, boolean);
DROP FUNCTION IF EXISTS idempotency_claim(text, text, text, text, bytea, text, bigint, bigint, boolean, boolean);
DROP FUNCTION IF EXISTS idempotency_request_lock_id(text, text, text, text, bytea);
DROP FUNCTION IF EXISTS idempotency_lock_id(text, text, text);
DROP TABLE IF EXISTS idempotency_keys;
