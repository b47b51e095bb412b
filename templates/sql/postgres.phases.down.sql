-- Drops everything postgres.phases.up.sql creates: recorded phases go
-- with it, and a retry calls its downstream again.
DROP TABLE IF EXISTS idempotency_phases;
