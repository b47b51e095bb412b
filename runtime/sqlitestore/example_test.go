package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "idem")
	defer os.RemoveAll(dir)
	// Open opens the file with the settings the store relies on; the
	// schema comes from Migrate or the generated migration.
	store, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "app.db"))
	fmt.Println(store != nil, err)
	if err == nil {
		_ = store.Close()
	}
	// Output: true <nil>
}

func ExampleOpenDB() {
	dir, _ := os.MkdirTemp("", "idem")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	// The application's own database, opened with the settings the store
	// relies on (WAL, IMMEDIATE transactions).
	db, err := sql.Open("sqlite", sqlitestore.DSN(filepath.Join(dir, "app.db")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	// The store holds the database's owner lock until Close: started
	// after a crash, it ends the leases the dead process left in flight.
	store, err := sqlitestore.OpenDB(ctx, db)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	fmt.Println(store.Migrate(ctx), store.EndedLeases())
	// Output: <nil> 0
}

func ExampleStore_Migrate() {
	dir, _ := os.MkdirTemp("", "idem")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	// Idempotent: safe on every start.
	fmt.Println(store.Migrate(ctx), store.Migrate(ctx))
	// Output: <nil> <nil>
}
