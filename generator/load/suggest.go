package load

import yaml "go.yaml.in/yaml/v4"

// The command line reads its config file with the same YAML package as
// the loader reads the extension, and answers mistakes in it the same way.

// Suggest returns the candidate closest to s when it is close enough to be
// a plausible typo, or "". Case, '-' and '_' are ignored, so that
// migration_table finds migrationTable.
func Suggest(s string, candidates []string) string {
	return suggest(s, candidates)
}

// Describe names a YAML value's type for messages: "an object", "a
// list", "the string \"x\"", "the number 3", "null".
func Describe(n *yaml.Node) string {
	return describe(n)
}
