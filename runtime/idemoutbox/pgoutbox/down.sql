-- Drops everything up.sql creates, staged effects with it.
DROP TABLE IF EXISTS idempotency_outbox;
