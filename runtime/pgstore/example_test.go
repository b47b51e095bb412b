package pgstore_test

import (
	"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// The schema must exist: pgstore.Migrate, or the generated migration.
	engine, err := idem.New(idem.Config{
		Store:    pgstore.New(pool),
		Policies: nil, // the generated Policies(), or call the generated NewEngine
		Tenant:   func(r *http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = engine
}

func ExampleMigrate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// Safe on every start and from several processes at once; services
	// that run a migration tool apply the generated migration instead.
	if err := pgstore.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
}
