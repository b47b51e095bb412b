package templates

// OutboxSchema returns the up and down migrations of the transactional
// outbox's table (runtime/idemoutbox) for a store of dialect ("postgres"
// or "sqlite"). It is a migration of its own, applied after PhaseSchema's;
// pgoutbox.Migrate and sqliteoutbox.Migrate apply the same text.
func OutboxSchema(dialect string) (up, down string, err error) {
	return schemaFiles(dialect, ".outbox")
}
