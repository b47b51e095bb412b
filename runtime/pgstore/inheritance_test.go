package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A handler's transaction that inserts an outbox row other than by
// StageEffect, under any identity, is not committed (docs/semantics.md
// §7.2, §8.3), and that holds for a row in an inheritance child of the
// outbox too. The end counts the outbox's inserts by PostgreSQL's
// statistics of the outbox's own relation (txWritesSQL), which do not
// count a child's rows, and making the first child writes the outbox's
// pg_class row (relhassubclass), which the end finds; but PostgreSQL never
// clears that flag when the child is dropped (only a manual ANALYZE of the
// parent does, autovacuum does not), so an outbox that ever had a child
// (an archive table an operator made, a partitioning tried and undone)
// would let a handler make one unseen. And where a child is there, no DDL
// is needed at all: an INSERT into it. So the end refuses a transaction
// that leaves a store's table with a child at all (pg_inherits), and the
// runners read the outbox with ONLY
// (TestTheStoreAndTheRunnersReadOnlyTheirOwnTables).
//
// The role is one an application commonly runs as: it ran the migrations,
// so it owns the outbox, and a child of the outbox is a table it may make
// (CREATE TABLE ... INHERITS needs the parent's owner). acme's handler,
// staging nothing, must not commit an effect under globex's identity, nor
// a runner deliver one as globex's.
func TestAnInheritanceChildOfTheOutboxIsNeitherCommittedNorDelivered(t *testing.T) {
	cases := map[string]struct {
		before  []string // run by the role before acme's request, outside any
		handler []string
	}{
		"child the handler makes, the outbox having had one": {
			before: []string{
				`CREATE TABLE {schema}.outbox_archive () INHERITS ({schema}.idempotency_outbox)`,
				`DROP TABLE {schema}.outbox_archive`,
			},
			handler: []string{
				`CREATE TABLE {schema}.pga_child () INHERITS ({schema}.idempotency_outbox)`,
				`INSERT INTO {schema}.pga_child (id, tenant, scope, key, effect_key, name, payload)
				 VALUES (900000001, 'globex', '', 'v1', 'forged-effect', 'refund', '\x00')`,
			},
		},
		"child that is there": {
			before: []string{
				`CREATE TABLE {schema}.outbox_archive () INHERITS ({schema}.idempotency_outbox)`,
			},
			handler: []string{
				`INSERT INTO {schema}.outbox_archive (id, tenant, scope, key, effect_key, name, payload)
				 VALUES (900000001, 'globex', '', 'v1', 'forged-effect', 'refund', '\x00')`,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r, pool, _, s := newOutboxRole(t)
			for _, q := range tc.before {
				if _, err := pool.Exec(ctx, r.replace(q)); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			acme := r.handlerCommits(t, s, tc.handler...)

			ob := pgoutbox.New(pool, idemoutbox.Options{})
			msgs, err := ob.Claim(ctx, 10, time.Minute, "runner-1")
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				t.Errorf("the runner was handed effect %q (%s) under %s/%q/%q, which acme's request (Commit: %v) "+
					"inserted itself, not by StageEffect", m.EffectKey, m.Name, m.Tenant, m.Scope, m.Key, acme)
			}
			if acme == nil {
				t.Errorf("acme's request, which staged nothing, committed an outbox row under globex's identity")
			}
		})
	}
}

// The same on the keys' table: a row in an inheritance child of
// idempotency_keys, which the end's statistics of idempotency_keys do not
// count (txWritesSQL), would be a row of idempotency_keys to every read
// of the store's without ONLY, the peek that decides a claim outside a
// transaction (peekSQL) first. acme's handler writes, in such a child,
// globex's key as completed with an answer of its own making (globex's
// request's fingerprint is the SHA-256 of its canonical form, which a
// handler that knows the request can compute); acme's request must not
// commit, and globex's first request for that key must run, not be
// answered the forged 200 as a replay (docs/semantics.md §7.2: a handler
// must not affect another request's key nor the stored answers).
func TestAKeyRowInAnInheritanceChildDecidesNoClaim(t *testing.T) {
	ctx := context.Background()
	r := newRoleStore(t, "{schema}")
	pool := r.pool()
	// An inheritance child the keys' table had once, dropped since: its
	// relhassubclass stays set, and the handler's own child is made unseen.
	for _, q := range []string{
		`CREATE TABLE {schema}.keys_archive () INHERITS ({schema}.idempotency_keys)`,
		`DROP TABLE {schema}.keys_archive`,
	} {
		if _, err := pool.Exec(ctx, r.replace(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	globex := tenantClaim("globex", "v9", "tok-globex")
	s := pgstore.New(r.pool())
	acme := r.handlerCommits(t, s,
		`CREATE TABLE {schema}.pga_keys () INHERITS ({schema}.idempotency_keys)`,
		`INSERT INTO {schema}.pga_keys (tenant, scope, key, operation, fingerprint, state, expires_at, completed_at, status, body)
		 VALUES ('globex', 'createTransfer', 'v9', 'createTransfer', '\x`+hexOf(globex.Fingerprint)+`', 'completed',
		         now() + interval '1 day', now(), 200, convert_to('{"forged_by":"acme"}', 'UTF8'))`)

	res, tx, err := pgstore.New(r.pool()).ClaimTx(ctx, globex)
	if err != nil {
		t.Fatalf("globex's claim: %v", err)
	}
	if tx != nil {
		_ = tx.Rollback(ctx)
	}
	if acme == nil {
		t.Errorf("acme's request committed a row in an inheritance child of idempotency_keys")
	}
	if !res.Won {
		body := ""
		if res.Existing.Response != nil {
			body = string(res.Existing.Response.Body)
		}
		t.Errorf("globex's first request for its key was not run but answered as %s with %q, an answer acme's request "+
			"(Commit: %v) wrote in an inheritance child of idempotency_keys", res.Existing.State, body, acme)
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// The store's and the runners' statements read and write their tables
// with ONLY, so that a row in an inheritance child of one, however it got
// there (an archive table an operator made with INHERITS, a child of a
// handler's that some check missed), is not one of theirs: it decides no
// claim, replays no answer, is found by no admin, and no runner hands it
// out or counts it. Here the role itself, outside any request, keeps in
// children of the keys' table and of the outbox a completed answer for
// globex's key and a pending effect.
func TestTheStoreAndTheRunnersReadOnlyTheirOwnTables(t *testing.T) {
	ctx := context.Background()
	r, pool, _, s := newOutboxRole(t)
	// One key for each of the claims, since a claim won and given back
	// leaves its key as the claim's kind leaves it.
	forged := []idemstore.Claim{tenantClaim("globex", "v9", "tok-v9"), tenantClaim("globex", "v10", "tok-v10")}
	stmts := []string{`CREATE TABLE {schema}.keys_archive () INHERITS ({schema}.idempotency_keys)`}
	for _, c := range forged {
		stmts = append(stmts, `INSERT INTO {schema}.keys_archive (tenant, scope, key, operation, fingerprint, state, expires_at, completed_at, status, body)
		 VALUES ('globex', 'createTransfer', '`+c.Key+`', 'createTransfer', '\x`+hexOf(c.Fingerprint)+`', 'completed',
		         now() + interval '1 day', now(), 200, convert_to('{"forged":true}', 'UTF8'))`)
	}
	stmts = append(stmts, `CREATE TABLE {schema}.outbox_archive () INHERITS ({schema}.idempotency_outbox)`,
		`INSERT INTO {schema}.outbox_archive (id, tenant, scope, key, effect_key, name, payload)
		 VALUES (900000001, 'globex', '', 'v1', 'forged-effect', 'refund', '\x00')`)
	for _, q := range stmts {
		if _, err := pool.Exec(ctx, r.replace(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	if e, err := s.Get(ctx, forged[0].Identity); err == nil {
		t.Errorf("the admin's Get of globex's %s found %s, a row in a child of idempotency_keys", forged[0].Key, e.State)
	}
	res, err := s.Claim(ctx, forged[0])
	if err != nil {
		t.Fatalf("globex's Claim of %s: %v", forged[0].Key, err)
	}
	if !res.Won {
		t.Errorf("globex's Claim of %s was decided %s by a row in a child of idempotency_keys", forged[0].Key, res.Existing.State)
	}
	res, tx, err := s.ClaimTx(ctx, forged[1])
	if err != nil {
		t.Fatalf("globex's ClaimTx of %s: %v", forged[1].Key, err)
	}
	if tx != nil {
		_ = tx.Rollback(ctx)
	}
	if !res.Won {
		t.Errorf("globex's ClaimTx of %s was decided %s by a row in a child of idempotency_keys", forged[1].Key, res.Existing.State)
	}

	ob := pgoutbox.New(pool, idemoutbox.Options{})
	msgs, err := ob.Claim(ctx, 10, time.Minute, "runner-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		t.Errorf("the runner was handed effect %q under %s/%q, a row in a child of the outbox", m.EffectKey, m.Tenant, m.Key)
	}
	if b, err := ob.Backlog(ctx); err != nil || b.Pending != 0 {
		t.Errorf("the backlog = %+v, %v: it counts a row in a child of the outbox", b, err)
	}
	if l, err := ob.List(ctx, idemoutbox.Query{}); err != nil || len(l) != 0 {
		t.Errorf("the list = %v, %v: it shows a row in a child of the outbox", l, err)
	}
}

// The key table's functions read and write the table itself only too
// (the migration 000004_idempotency_keys_only): idempotency_sweep, which
// picked the expired rows of the table and its children and then deleted
// every row of their keys, deleted a key's live row in the table for an
// expired row of the same key in a child, and globex's completed request
// then ran again on its retry.
func TestTheSweepDeletesOnlyTheKeyTablesOwnExpiredRows(t *testing.T) {
	r := newRoleStore(t, "{schema}")
	sweepWithAnExpiredChildRow(t, r, pgstore.New(r.pool()))
}

// sweepWithAnExpiredChildRow completes globex's v8 on s, puts an expired
// row of v8 in a child of idempotency_keys, sweeps, which the sweeper
// refuses while the child is there, and fails the test unless globex's
// retry is answered with its own completion.
func sweepWithAnExpiredChildRow(t *testing.T, r *roleStore, s *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	pool := r.pool()
	done := tenantClaim("globex", "v8", "tok-v8")
	if res, err := s.Claim(ctx, done); err != nil || !res.Won {
		t.Fatalf("globex's claim of v8 = %+v, %v", res, err)
	}
	if err := s.Complete(ctx, done.Identity, done.Token, idemstore.Response{Status: 201, Body: []byte("globex's own")}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE {schema}.keys_archive () INHERITS ({schema}.idempotency_keys)`,
		`INSERT INTO {schema}.keys_archive (tenant, scope, key, operation, fingerprint, state, expires_at, completed_at, status, body)
		 VALUES ('globex', 'createTransfer', 'v8', 'createTransfer', '\x` + hexOf(done.Fingerprint) + `', 'completed',
		         now() - interval '1 day', now() - interval '2 days', 200, convert_to('{"archived":true}', 'UTF8'))`,
	} {
		if _, err := pool.Exec(ctx, r.replace(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := s.Sweep(ctx, 100); !errors.Is(err, pgstore.ErrInheritedTable) {
		t.Errorf("Sweep with a child of idempotency_keys = %v, want ErrInheritedTable", err)
	}
	again := done
	again.Token = "tok-v8-again"
	res, err := s.Claim(ctx, again)
	if err != nil || res.Won || res.Existing.Response == nil || string(res.Existing.Response.Body) != "globex's own" {
		t.Errorf("globex's completed v8, after a sweep, answers won=%v %+v, %v: the sweep of an expired row of v8 "+
			"in a child of idempotency_keys deleted globex's own, so the key runs again", res.Won, res.Existing, err)
	}
}
