-- Drops everything sqlite.phases.up.sql creates: recorded phases go with
-- it, and a retry calls its downstream again.
DROP INDEX IF EXISTS idempotency_phases_expires_at_idx;
DROP TABLE IF EXISTS idempotency_phases;
