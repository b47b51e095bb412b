package pgstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/generator/sqlgen"
	"github.com/idemgen/idemgen/runtime/idemadmin/admintest"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/templates"
)

// releasedSchema is the key table of the last release, as its migration
// 000001 created it. It never changes: a schema change ships as a new
// migration, and this test proves the upgrade path from it.
const releasedSchema = "testdata/released/000001_idempotency_keys.up.sql"

// A key table created by the released migration and populated by a store
// is migrated through every migration in order; the current store then
// reads, replays and takes over the rows it finds there.
func TestUpgradeFromReleasedSchema(t *testing.T) {
	url := testURL(t)
	ctx := context.Background()
	released, err := os.ReadFile(releasedSchema)
	if err != nil {
		t.Fatal(err)
	}
	// A released migration's statements are never edited: databases have
	// applied them. Its comments may be corrected, since none of the
	// migration tools idemgen writes for (golang-migrate, goose, dbmate)
	// checksums a file.
	if first, _, err := templates.Schema("postgres"); err != nil || !sqlgen.SameStatements([]byte(first), released) {
		t.Fatalf("migration 000001 differs from the released one (%v): ship a schema change as a new migration with an upgrade path, and leave 000001 as released", err)
	}
	schema := "idemtest_" + randomHex(6)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(context.Background())
	})
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	pool := openPool(t, schema)
	if _, err := pool.Exec(ctx, string(released)); err != nil {
		t.Fatalf("apply the released schema: %v", err)
	}
	check := admintest.Upgrade(t, pgstore.New(pool))
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate a populated released table: %v", err)
	}
	check(t, pgstore.New(pool))
}
