package pgstore_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// A handler that ends its transaction itself is settled: the key becomes
// indeterminate, "never freed" (docs/semantics.md §5.4). settle undoes the
// role, the search_path and temporary relations before it marks the key
// (settleSessionSQL), but not the other settings the handler left on its
// session: after a raw ROLLBACK, a write in autocommit mode and
// default_transaction_read_only, failClosedTxSQL fails, the claim's row
// went with the ROLLBACK, and closing the session frees the key. The
// retry claims it afresh and runs the handler's write a second time.
func TestSettleMarksTheKeyWhateverTheSessionSettings(t *testing.T) {
	cases := map[string][]string{
		"read only": {
			`ROLLBACK`,
			`INSERT INTO effects (marker) VALUES ('charge')`,
			`SET default_transaction_read_only = on`,
		},
		"read only, as a session characteristic": {
			`ROLLBACK`,
			`INSERT INTO effects (marker) VALUES ('charge')`,
			`SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY`,
		},
	}
	for name, stmts := range cases {
		t.Run(name, func(t *testing.T) {
			s, pool := newStore(t)
			ctx := context.Background()
			res, tx, err := s.ClaimTx(ctx, claimFor("k1", "tok1", time.Minute))
			if err != nil || !res.Won {
				t.Fatalf("ClaimTx = %+v, %v", res, err)
			}
			h := pgstore.Unchecked(tx)
			for _, q := range stmts {
				if _, err := h.Exec(ctx, q); err != nil {
					t.Logf("%s: %v", q, err)
				}
			}
			commitErr := tx.Commit(ctx, idemstore.Response{Status: 201, Body: []byte(`{"ok":true}`)})
			t.Logf("Commit: %v", commitErr)
			var state string
			if err := pool.QueryRow(ctx, `SELECT state FROM idempotency_keys WHERE key = 'k1'`).Scan(&state); err != nil && err != pgx.ErrNoRows {
				t.Fatal(err)
			}
			t.Logf("the key's row after Commit: %q", state)
			// The closed session's locks go a moment after Commit returns:
			// the retry comes back after a client's backoff.
			var tx2 idemstore.Tx
			for range 20 {
				res, tx2, err = s.ClaimTx(ctx, claimFor("k1", "tok2", time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				if res.Won || res.Existing.State != idemstore.StateInFlight {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("the retry's claim: %+v", res)
			if res.Won {
				if _, err := tx2.Driver().(pgx.Tx).Exec(ctx, `INSERT INTO effects (marker) VALUES ('charge')`); err != nil {
					t.Fatal(err)
				}
				if err := tx2.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
					t.Fatal(err)
				}
			}
			n, err := countEffects(ctx, pool, "charge")
			if err != nil {
				t.Fatal(err)
			}
			if n > 1 {
				t.Fatalf("the handler's write committed %d times for one key: the key was freed after a handler ended its transaction (retry won %v, existing %q)", n, res.Won, res.Existing.State)
			}
		})
	}
}

// The same through the engine: the client is told 500 outcome-unknown, and
// its retry with the key runs the handler again.
func TestSettleThroughTheEngineNeverFreesTheKey(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	h := idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		for _, q := range []string{
			`ROLLBACK`,
			`INSERT INTO effects (marker) VALUES ('charge')`,
			`SET default_transaction_read_only = on`,
		} {
			if _, err := tx.Exec(r.Context(), q); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		enginetest.Created(w, r.Header.Get("Idempotency-Key"))
	})
	es := enginetest.ServeEngine(t, s, h, enginetest.EnginePolicy("createTransfer", "/transfers", time.Minute, idemstore.Takeover, true))
	first := es.MustPost(t, "/transfers", "k1", `{"amount":1}`)
	t.Logf("first: %s", first)
	var retry enginetest.Answer
	for range 20 {
		retry = es.MustPost(t, "/transfers", "k1", `{"amount":1}`)
		if retry.Status != http.StatusConflict || es.RunsOf("k1") > 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("retry: %s", retry)
	n, err := countEffects(ctx, pool, "charge")
	if err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Fatalf("one key ran the handler %d times and committed its write %d times", es.RunsOf("k1"), n)
	}
}
