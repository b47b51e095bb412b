package pgstore_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/templates"
)

// A handler's transaction writes through pgstore's own session and role,
// which may own the store's tables. What it writes to them besides its
// own claim, or what it makes of them, would undo another tenant's
// request: a completed key deleted runs again, a phase deleted or expired
// calls its downstream again, an effect deleted is lost. Such a
// transaction is not committed, keyed or keyless (docs/semantics.md §7.2),
// and everything another tenant stored stands as it was.
func TestAHandlerCannotCommitChangesToOtherRequestsRecords(t *testing.T) {
	cases := map[string][]string{
		"another key deleted":        {`DELETE FROM idempotency_keys WHERE tenant <> 't1'`},
		"another key's answer":       {`UPDATE idempotency_keys SET body = 'forged' WHERE tenant <> 't1'`},
		"a key written and undone":   {`SAVEPOINT s`, `DELETE FROM idempotency_keys WHERE tenant <> 't1'`, `ROLLBACK TO SAVEPOINT s`, `DELETE FROM idempotency_keys WHERE tenant <> 't1'`},
		"keys truncated, claim kept": {`CREATE TEMP TABLE mine AS SELECT * FROM idempotency_keys WHERE tenant = 't1'`, `TRUNCATE idempotency_keys`, `INSERT INTO idempotency_keys SELECT * FROM mine`},
		"keys table altered":         {`ALTER TABLE idempotency_keys SET (fillfactor = 100)`},
		"a phase deleted":            {`DELETE FROM idempotency_phases`},
		"a phase expired":            {`UPDATE idempotency_phases SET expires_at = clock_timestamp()`},
		"a rule on the phases":       {`CREATE RULE forget AS ON INSERT TO idempotency_phases DO INSTEAD NOTHING`},
		"an effect deleted":          {`DELETE FROM idempotency_outbox`},
		"an effect made dead":        {`UPDATE idempotency_outbox SET state = 'dead'`},
		"a policy on the outbox":     {`CREATE POLICY mine ON idempotency_outbox USING (tenant = 't1')`},
	}
	for name, stmts := range cases {
		for _, keyless := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: ", keyless"}[keyless], func(t *testing.T) {
				t.Parallel()
				s, pool := newStore(t)
				ctx := context.Background()
				outbox, _, err := templates.OutboxSchema("postgres")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, outbox); err != nil {
					t.Fatal(err)
				}
				// Another tenant's request, completed, with a phase and an
				// effect.
				globex := tenantClaim("globex", "v1", "tok-globex")
				if res, err := s.Claim(ctx, globex); err != nil || !res.Won {
					t.Fatalf("Claim = %+v, %v", res, err)
				}
				answer := []byte(`{"charge":1}`)
				if err := s.Complete(ctx, globex.Identity, globex.Token, idemstore.Response{Status: 201, Body: answer}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.RecordPhase(ctx, globex.Identity, "charge", []byte("ch_1"), time.Hour); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `INSERT INTO idempotency_outbox (tenant, scope, key, effect_key, name, payload)
					VALUES ('globex', $1, $2, 'e1', 'receipt', 'r')`, globex.Scope, globex.Key); err != nil {
					t.Fatal(err)
				}

				var tx idemstore.Tx
				if keyless {
					tx, err = s.Begin(ctx, time.Minute)
				} else {
					var res idemstore.Result
					res, tx, err = s.ClaimTx(ctx, claimFor("k1", "tok1", time.Minute))
					if err == nil && !res.Won {
						t.Fatalf("ClaimTx = %+v", res)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				steps := handlerSteps{h: tx.Driver().(pgx.Tx)}
				for _, q := range stmts {
					if err := steps.exec(ctx, q); err != nil {
						_ = tx.Rollback(ctx)
						t.Fatalf("%s: %v", q, err)
					}
				}
				if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err == nil {
					t.Errorf("the handler's transaction committed")
				}

				res, err := s.Claim(ctx, func() idemstore.Claim { c := globex; c.Token = "tok-retry"; return c }())
				if err != nil {
					t.Fatal(err)
				}
				if stored := res.Existing.Response; res.Won || stored == nil || !bytes.Equal(stored.Body, answer) {
					t.Errorf("globex's retry: won %v, found %+v; want its stored answer %q", res.Won, res.Existing, answer)
				}
				if got, found, err := s.LoadPhase(ctx, globex.Identity, "charge"); err != nil || !found || string(got) != "ch_1" {
					t.Errorf("globex's phase = %q, %v, %v; want ch_1", got, found, err)
				}
				var pending int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_outbox WHERE tenant = 'globex' AND state = 'pending'`).Scan(&pending); err != nil {
					t.Fatal(err)
				}
				if pending != 1 {
					t.Errorf("globex's pending effects: %d, want 1", pending)
				}
				var made int
				if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_rewrite WHERE ev_class = 'idempotency_phases'::regclass)
					+ (SELECT count(*) FROM pg_policy WHERE polrelid = 'idempotency_outbox'::regclass)`).Scan(&made); err != nil && err != pgx.ErrNoRows {
					t.Fatal(err)
				}
				if made != 0 {
					t.Errorf("%d rules or policies on the store's tables outlive the transaction", made)
				}
			})
		}
	}
}
