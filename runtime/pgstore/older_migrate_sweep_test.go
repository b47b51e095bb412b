package pgstore_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/templates"
)

// A process of the previous release runs its pgstore.Migrate on every
// start, and that Migrate applies 000001 (CREATE OR REPLACE of the key
// table's functions, without ONLY) and 000002, never 000004: during a
// rolling deploy, a rollback of one replica, or where a tool has not
// applied 000004 yet, the key table's functions are 000001's again. With
// an inheritance child of idempotency_keys in place, their sweep would
// delete globex's completed key for an expired row of the same key in the
// child, and globex's retry would run its request again (docs/semantics.md
// §5.1, §7.4). The sweeper refuses to run while a store table has a child.
func TestSweepRefusesWhileAStoreTableHasAChildUnderTheOlderFunctions(t *testing.T) {
	ctx := context.Background()
	r := newRoleStore(t, "{schema}")
	pool := r.pool()
	up, _, err := templates.Schema("postgres")
	if err != nil {
		t.Fatal(err)
	}
	phases, _, err := templates.PhaseSchema("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "BEGIN;\n"+up+"\n"+phases+"\nCOMMIT;"); err != nil {
		t.Fatalf("the previous release's Migrate: %v", err)
	}
	sweepWithAnExpiredChildRow(t, r, pgstore.New(r.pool()))
}
