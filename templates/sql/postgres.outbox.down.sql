-- Drops everything the up migration creates, staged effects with it.
DROP TABLE IF EXISTS idempotency_outbox;
