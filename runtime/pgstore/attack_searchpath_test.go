package pgstore_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// An operator or a function that a handler makes, in a schema its role
// may create in, is chosen in place of pg_catalog's of the same argument
// types wherever that schema comes before pg_catalog on the search_path
// (docs/semantics.md §7.2). pg_catalog comes first unless the path names
// it later: a handler's SET LOCAL search_path = s, pg_catalog, or its SET
// for the session, or a search_path the deployment gives the role. Here
// acme's handler makes, in the store's schema, which its role owns, an
// =(text, text) that answers true for any two texts, and its request
// must not commit: the end of a transaction refuses any operator it made
// (docs/semantics.md §7.2). Nor may any statement of pgstore's compare
// with it, whether it committed or not: not the completion in the
// handler's own transaction, under its SET LOCAL, nor the checks and the
// reset after its COMMIT, under its SET, nor, under the deployment's
// search_path, a later claim of acme's on a new connection, which
// compared globex's row with the key as one of its own and answered
// acme's new key with globex's response. Each such claim must win its
// key, each phase be acme's own, globex's completed request replay, and
// the key globex holds stay its own to complete.
func TestAHandlersOperatorBeforePgCatalogDecidesNoClaim(t *testing.T) {
	operator := []string{
		`CREATE FUNCTION {schema}.same(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'`,
		`CREATE OPERATOR {schema}.= (LEFTARG = text, RIGHTARG = text, FUNCTION = {schema}.same)`,
	}
	cases := map[string]struct {
		searchPath string
		handler    []string
	}{
		"handler's SET LOCAL":      {`{schema}`, append(operator[:2:2], `SET LOCAL search_path = {schema}, pg_catalog`)},
		"handler's SET":            {`{schema}`, append(operator[:2:2], `SET search_path = {schema}, pg_catalog`)},
		"deployment's search_path": {`{schema}, pg_catalog`, operator},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := newRoleStore(t, c.searchPath)
			pool := r.pool()
			s := pgstore.New(pool)
			globex := tenantClaim("globex", "k1", "tok-globex")
			if !runCharge(t, s, globex, r.replace(`INSERT INTO {schema}.effects (marker) VALUES ('globex-charge')`)) {
				t.Fatal("globex's claim lost")
			}
			if _, err := s.RecordPhase(ctx, globex.Identity, "charge", []byte("globex's card"), time.Hour); err != nil {
				t.Fatal(err)
			}
			held := tenantClaim("globex", "k2", "tok-globex-k2")
			if res, err := s.Claim(ctx, held); err != nil || !res.Won {
				t.Fatalf("globex's claim of k2 = %+v, %v", res, err)
			}

			acme := r.handlerCommits(t, s, c.handler...)

			// globex's request in flight is still its own to complete.
			if err := s.Complete(ctx, held.Identity, held.Token, idemstore.Response{Status: 201}); err != nil {
				t.Errorf("globex's completion of the key it holds: %v (acme's request committed: %v)", err, acme)
			}

			// On the handler's own pool, whose connection the handler's
			// session was, and on a new one.
			for _, s := range []*pgstore.Store{s, pgstore.New(r.pool())} {
				for _, tx := range []bool{true, false} {
					claim := tenantClaim("acme", "k1", "tok-acme-k1")
					var (
						res idemstore.Result
						err error
					)
					if tx {
						var htx idemstore.Tx
						if res, htx, err = s.ClaimTx(ctx, claim); err == nil && res.Won {
							err = htx.Rollback(ctx)
						}
					} else if res, err = s.Claim(ctx, claim); err == nil && res.Won {
						err = s.Release(ctx, claim.Identity, claim.Token)
					}
					if err != nil || !res.Won {
						var replayed []byte
						if res.Existing.Response != nil {
							replayed = res.Existing.Response.Body
						}
						t.Errorf("acme's first claim of a key (transactional %t) = %s, replaying %q, %v; want it won, not decided by globex's key "+
							"(acme's request committed: %v)", tx, res.Existing.State, replayed, err, acme)
					}
				}
				if got, ok, err := s.LoadPhase(ctx, tenantClaim("acme", "k1", "").Identity, "charge"); err != nil || ok {
					t.Errorf("acme's phase of a key it never recorded = %q, %t, %v; want none", got, ok, err)
				}
				res, err := s.Claim(ctx, tenantClaim("globex", "k1", "tok-globex-retry"))
				if err != nil || res.Won || res.Existing.Response == nil || !bytes.Equal(res.Existing.Response.Body, []byte(`{"charge":1}`)) {
					t.Errorf("globex's retry = %+v, %v; want its response replayed (acme's request committed: %v)", res.Existing.Response, err, acme)
				}
			}
		})
	}
}
