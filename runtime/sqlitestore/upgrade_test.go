package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemadmin/admintest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/templates"
)

// releasedSchema is the key table of the last release, as its migration
// 000001 created it. It never changes: a schema change ships as a new
// migration, and this test proves the upgrade path from it.
const releasedSchema = "testdata/released/000001_idempotency_keys.up.sql"

// A key table created by the released migration and populated by a store
// is migrated through every migration in order; the current store, opened
// anew on the file, then reads, replays and takes over the rows it finds.
func TestUpgradeFromReleasedSchema(t *testing.T) {
	ctx := context.Background()
	released, err := os.ReadFile(releasedSchema)
	if err != nil {
		t.Fatal(err)
	}
	// A released migration is never edited: databases have applied it.
	if first, _, err := templates.Schema("sqlite"); err != nil || first != string(released) {
		t.Fatalf("migration 000001 differs from the released one (%v): ship a schema change as a new migration with an upgrade path, and leave 000001 as released", err)
	}
	path := filepath.Join(t.TempDir(), "idem.db")
	old, err := sqlitestore.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.DB().ExecContext(ctx, string(released)); err != nil {
		t.Fatalf("apply the released schema: %v", err)
	}
	check := admintest.Upgrade(t, old)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	current, err := sqlitestore.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = current.Close() })
	if err := current.Migrate(ctx); err != nil {
		t.Fatalf("migrate a populated released table: %v", err)
	}
	check(t, current)
}
