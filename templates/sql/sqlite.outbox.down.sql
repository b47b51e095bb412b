-- Drops everything the up migration creates, staged effects with it.
DROP INDEX IF EXISTS idempotency_outbox_request_idx;
DROP INDEX IF EXISTS idempotency_outbox_delivered_idx;
DROP INDEX IF EXISTS idempotency_outbox_undelivered_idx;
DROP INDEX IF EXISTS idempotency_outbox_due_idx;
DROP INDEX IF EXISTS idempotency_outbox_pending_key_idx;
DROP TABLE IF EXISTS idempotency_outbox;
