//go:build linux

package sqlitestore_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The store finds its database file, whose owner lock tells a store that
// starts with WithDeadHolderRecovery whether any other store has the
// database open (docs/semantics.md §5.2, §7.4), by SQLite's
// database_list pragma. A view named pragma_database_list (made before
// handlers were refused such names) answers for the pragma's table-valued
// function, "" as an in-memory database would, and is no part of what
// the store reads: a store opened beside a live one still finds the file,
// takes the lock shared, and ends no live lease, and the retry of a claim
// in flight loses to it rather than taking it over (the key would run
// twice).
func TestAViewNamedAsDatabaseListHidesNoDatabaseFile(t *testing.T) {
	ctx := context.Background()
	path := newOwnerDB(t)
	s0 := openOwner(t, path)
	if _, err := s0.DB().ExecContext(ctx, `CREATE VIEW pragma_database_list AS SELECT '' AS file, 'main' AS name`); err != nil {
		t.Fatal(err)
	}
	// The service restarts (a deploy) with the view in place.
	if err := s0.Close(); err != nil {
		t.Fatal(err)
	}
	live := openOwner(t, path)
	if res, err := live.Claim(ctx, ownerClaim("k-live", "tok-live", idemstore.Takeover)); err != nil || !res.Won {
		t.Fatalf("live claim = %+v, %v", res, err)
	}
	// The view goes (a handler may drop one), so that a store that read
	// it would now find the file, and take the lock alone.
	if _, err := live.DB().ExecContext(ctx, `DROP VIEW pragma_database_list`); err != nil {
		t.Fatal(err)
	}
	// Another process starts beside the live one, with recovery.
	next := openOwner(t, path)
	if n := next.EndedLeases(); n != 0 {
		t.Errorf("a store opened beside a live one ended %d leases", n)
	}
	res, err := next.Claim(ctx, ownerClaim("k-live", "tok-retry", idemstore.Takeover))
	if err != nil || res.Won {
		t.Errorf("retry of the live claim = %+v, %v; want it lost to the claim in flight, not taken over (the key runs twice)", res, err)
	}
}
