//go:build mutants

package pgstore

// SkipReset takes stmt out of the session resets (resetSQL and
// leanResetSQL) for the rest of the process, in its place a statement that
// does nothing: the store then leaves one kind of a handler's session state
// to the next request on the connection. Only the mutation run's child
// process, which runs nothing else, calls it.
func SkipReset(stmt string) {
	for _, reset := range [][]string{resetSQL[:], leanResetSQL[:]} {
		for i, q := range reset {
			if q == stmt {
				reset[i] = "SELECT 1"
			}
		}
	}
}
