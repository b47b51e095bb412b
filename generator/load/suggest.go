package load

// Suggest returns the candidate closest to s when it is close enough to be
// a plausible typo, or "". Case, '-' and '_' are ignored, so that
// migration_table finds migrationTable. The command line uses it for the
// keys of its config file, so that both files answer a typo alike.
func Suggest(s string, candidates []string) string {
	return suggest(s, candidates)
}
