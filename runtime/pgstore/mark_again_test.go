package pgstore_test

import (
	"errors"
	"testing"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// The end of a handler's transaction told the transaction pgstore began
// from one the handler began by its mark, idemgen.transaction, which the
// handler can read, and by PostgreSQL's counts of the transaction's
// writes, which are the session's counts since it last reported them.
// A handler that commits on its own, stays idle long enough for the
// session to report its counts (a second), begins again, puts the mark
// back and makes the counts what the end expects (its own row updated as
// often as the claim's count says) passed every check: its request
// completed as if its transaction were the claim's. Checked at the end
// only, its raw COMMIT had already committed what it wrote before (here,
// another tenant's key deleted), and that tenant's completed request ran
// again. The handler's COMMIT is refused before it is sent
// (docs/semantics.md §5.4): nothing of its transaction commits, and the
// other tenant's key still replays.
func TestAHandlerThatPutsTheMarkBackPassesTheEnd(t *testing.T) {
	refused, acmeErr := handlerEndsWithAnotherTenantsKeyDeleted(t, []string{
		`COMMIT`,
		// Idle, outside a transaction, past PostgreSQL's minimum
		// interval between reports of a session's counts.
		`SELECT pg_sleep(1.2)`,
		`SELECT 1`,
		`BEGIN ISOLATION LEVEL READ COMMITTED`,
	})
	if len(refused) != 2 {
		t.Errorf("refused %q; want the COMMIT and the BEGIN", refused)
	}
	// The handler wrote the store's table, so the end cannot tell its
	// transaction from one it ended: the key may be left indeterminate,
	// but nothing of the transaction commits.
	if !errors.Is(acmeErr, pgstore.ErrHandlerEndsTransaction) {
		t.Errorf("acme's Commit = %v; want it rolled back for the handler's refused COMMIT", acmeErr)
	}
}
