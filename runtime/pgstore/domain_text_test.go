package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// Under a search_path that names pg_catalog late ("app, pg_catalog",
// docs/semantics.md §7.2), a domain named text in the store's schema
// would be what the migrations' "p_tenant text" means, and Migrate's
// CREATE OR REPLACE FUNCTION idempotency_claim(p_tenant text, ...) would
// add a function over the domain beside pgstore's instead of replacing
// it, so that an upgrade's migration never reached the functions pgstore
// calls. A handler may not make the domain; and one there anyway (the
// application's own migration made it) does not change what Migrate
// creates or replaces.
func TestADomainNamedTextNeitherCommitsNorMakesMigrateOverload(t *testing.T) {
	ctx := context.Background()
	r := newRoleStore(t, "{schema}, pg_catalog")
	s := pgstore.New(r.pool())
	if err := r.handlerCommits(t, s, `CREATE DOMAIN {schema}.text AS pg_catalog.text`); err == nil {
		t.Errorf("acme's request committed a domain named text in the store's schema")
	}
	pool := r.pool()
	if _, err := pool.Exec(ctx, r.replace(`CREATE DOMAIN {schema}.text AS pg_catalog.text`)); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate with a domain named text in the store's schema: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_proc WHERE proname = 'idempotency_claim'
	    AND pronamespace = $1::text::regnamespace`, r.schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("after a Migrate, the store's schema has %d functions named idempotency_claim: Migrate created "+
			"its own over the domain text instead of replacing pgstore's", n)
	}
}

// The outbox's migration (pgoutbox.Migrate, 000003) declares its columns
// text: under a search_path that names pg_catalog late they would be made
// of a domain named text in the store's schema, and a CHECK that a
// handler later gave the domain would run the handler's code in a
// runner's session, which could rewrite another tenant's stored answer
// (docs/semantics.md §7.2, §8.3). The columns are pg_catalog's text, and
// a handler may not give such a domain a constraint.
func TestADomainNamedTextTypesNoOutboxColumnNorTakesAHandlersCheck(t *testing.T) {
	ctx := context.Background()
	r := newRoleStore(t, "{schema}, pg_catalog")
	s := pgstore.New(r.pool())
	done := tenantClaim("globex", "v7", "tok-v7")
	if res, err := s.Claim(ctx, done); err != nil || !res.Won {
		t.Fatalf("globex's claim of v7 = %+v, %v", res, err)
	}
	if err := s.Complete(ctx, done.Identity, done.Token, idemstore.Response{Status: 201, Body: []byte("globex's own")}); err != nil {
		t.Fatal(err)
	}
	pool := r.pool()
	// The application's own migration makes the domain, plain.
	if _, err := pool.Exec(ctx, r.replace(`CREATE DOMAIN {schema}.text AS pg_catalog.text`)); err != nil {
		t.Fatal(err)
	}
	// The service adopts the outbox: its next start applies 000003.
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		t.Fatalf("pgoutbox.Migrate: %v", err)
	}
	var domained int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_attribute
	    WHERE attrelid = ($1 || '.idempotency_outbox')::regclass AND attnum > 0
	      AND atttypid = ($1 || '.text')::regtype`, r.schema).Scan(&domained); err != nil {
		t.Fatal(err)
	}
	if domained != 0 {
		t.Errorf("pgoutbox.Migrate made %d of the outbox's columns of the domain text in the store's schema", domained)
	}
	acme := r.handlerCommitsKey(t, s, "m92", "tok-acme-m92",
		`CREATE FUNCTION {schema}.acme_spy(v pg_catalog.text) RETURNS pg_catalog.bool LANGUAGE plpgsql AS $f$
		 BEGIN
		   IF v OPERATOR(pg_catalog.~~) 'runner-%' THEN
		     UPDATE {schema}.idempotency_keys SET body = pg_catalog.convert_to('forged by acme', 'UTF8')
		      WHERE tenant OPERATOR(pg_catalog.=) 'globex';
		   END IF;
		   RETURN true;
		 END $f$`,
		`ALTER DOMAIN {schema}.text ADD CONSTRAINT acme_check CHECK ({schema}.acme_spy(VALUE))`)
	if acme == nil {
		t.Errorf("acme's request committed a check on the domain text")
	}
	if _, err := pool.Exec(ctx, r.replace(`INSERT INTO {schema}.idempotency_outbox (tenant, scope, key, effect_key, name, payload)
	     VALUES ('initech', '', 'k1', 'e1', 'mail', '\x00')`)); err != nil {
		t.Fatal(err)
	}
	ob := pgoutbox.New(pool, idemoutbox.Options{})
	if _, err := ob.Claim(ctx, 10, time.Minute, "runner-1"); err != nil {
		t.Fatalf("the runner's claim: %v", err)
	}
	again := done
	again.Token = "tok-v7-again"
	res, err := s.Claim(ctx, again)
	if err != nil || res.Won || res.Existing.Response == nil || string(res.Existing.Response.Body) != "globex's own" {
		t.Errorf("globex's completed v7 answers won=%v %+v, %v, after acme's request (Commit: %v) gave the "+
			"domain text a check that a runner's claim ran", res.Won, res.Existing, err, acme)
	}
}

// The migrations' key columns are COLLATE "C", a name found through the
// search_path like a type's: a collation named "C" in the application's
// schema, before pg_catalog on a tool's search_path, would be theirs, and
// a nondeterministic one would make two keys one. A handler may not make
// one.
func TestAHandlersCollationNamedCDoesNotCommit(t *testing.T) {
	r := newRoleStore(t, "{schema}, pg_catalog")
	if err := r.handlerCommits(t, pgstore.New(r.pool()), `CREATE COLLATION {schema}."C" (locale = 'C')`); err == nil {
		t.Errorf(`acme's request committed a collation named "C" in the store's schema`)
	}
}
