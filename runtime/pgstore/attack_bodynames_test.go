package pgstore_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// pgstore's claim path names clock_timestamp() unqualified (the tests'
// clock takes its place, openOnClock), and the bodies of the store's
// functions name every function, operator and type unqualified: both
// resolve them through the session's search_path, where pg_catalog comes
// first only while the path does not name it. A deployment's search_path
// that names it after the application's schema ("app, pg_catalog")
// puts that schema first, and a handler whose role may create there makes
// a name the statements or the functions then find in place of
// pg_catalog's (docs/semantics.md §7.2). Its request must not commit, or
// every connection opened afterwards decides other tenants' keys by it:
//
//   - a clock_timestamp() 400 days ahead finds every completed row
//     expired, and idempotency_claim overwrites another tenant's
//     completed key and runs it again;
//   - an =(text, text) that answers true for any two texts but a state
//     compared with 'in_flight' has idempotency_sweep, which compares
//     the rows it deletes with the expired ones it found, delete every
//     row once one has expired: another tenant's completed key among
//     them.
func TestAHandlersNameBeforePgCatalogReopensAnotherTenantsKey(t *testing.T) {
	cases := map[string][]string{
		"clock_timestamp": {
			`CREATE FUNCTION {schema}.clock_timestamp() RETURNS timestamptz LANGUAGE sql
			 AS $$ SELECT pg_catalog.statement_timestamp() OPERATOR(pg_catalog.+) '400 days'::pg_catalog.interval $$`,
		},
		"=(text, text)": {
			`CREATE FUNCTION {schema}.same(a text, b text) RETURNS boolean LANGUAGE sql IMMUTABLE
			 AS $$ SELECT a OPERATOR(pg_catalog.=) b OR b OPERATOR(pg_catalog.<>) 'in_flight' $$`,
			`CREATE OPERATOR {schema}.= (LEFTARG = text, RIGHTARG = text, FUNCTION = {schema}.same)`,
		},
	}
	for name, handler := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := newRoleStore(t, "{schema}, pg_catalog")
			s := pgstore.New(r.pool())

			// globex's request runs and completes; another key, long
			// expired, waits for the sweeper.
			globex := tenantClaim("globex", "v1", "tok-globex")
			if !runCharge(t, s, globex, r.replace(`INSERT INTO {schema}.effects (marker) VALUES ('globex-charge')`)) {
				t.Fatal("globex's first claim lost")
			}
			if _, err := r.admin.Exec(ctx, r.replace(`INSERT INTO {schema}.idempotency_keys
				    (tenant, scope, key, operation, fingerprint, state, expires_at, created_at)
				VALUES ('initech', 'createTransfer', 'old', 'createTransfer', '\x00', 'completed',
				        pg_catalog.now() - interval '1 day', pg_catalog.now() - interval '2 days')`)); err != nil {
				t.Fatal(err)
			}

			acme := r.handlerCommits(t, s, handler...)
			if acme == nil {
				t.Errorf("acme's request committed a %s in a schema the search_path names before pg_catalog", name)
			}

			// A replica that starts afterwards sweeps, and meets globex's
			// retry.
			n, err := pgstore.New(r.pool()).Sweep(ctx, 100)
			t.Logf("the sweep deleted %d keys: %v", n, err)
			r.wantReplay(t, globex, acme)
		})
	}
}
