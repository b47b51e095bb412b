package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// docs/semantics.md §6: claim, replay and conflict cost one round trip each, a
// completion one more. Transactional mode reads a row that decides the
// claim first, outside a transaction, so that a replay is that read alone;
// a new key costs one more round trip, the pipelined batch of BEGIN and the
// claim, and Commit sends the completion with COMMIT.
// Counted twice: pgx queries and batches through a tracer, and writes on
// the socket. A transactional claim also asks for its key's guard (guard.go)
// on the guard's own connection, in a query sent at the same time as the
// claim's batch, and lets it go, the same way, after Commit; the counts
// below include those queries, which add no round trip to the claim's
// latency. The test waits for the guard to be quiet around each
// step, so that each batch is counted in the step that sent it.
func TestRoundTrips(t *testing.T) {
	var rt roundTrips
	// A database of the test's own, where no other test's schema has the
	// measured end take the full reset (quietDatabase).
	db := quietDatabase(t)
	s := pgstore.New(openPoolIn(t, db, newSchemaIn(t, db), func(c *pgxpool.Config) {
		// One connection, so the warm-up below prepares the statements on
		// the connection that is measured.
		c.MaxConns = 1
		rt.install(c)
	}))
	pgstore.SetGuardIdleClose(s, time.Hour)
	ctx := context.Background()
	resp := idemstore.Response{Status: 201, Header: map[string][]string{"Location": {"/x"}}, Body: []byte("{}")}

	claim := func(c idemstore.Claim) idemstore.Result {
		t.Helper()
		res, err := s.Claim(ctx, c)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		return res
	}

	// Warm up: pgx prepares each statement on its first use per connection,
	// which is one more round trip once.
	warm := func(key string) {
		c := claimFor(key, "warm", time.Minute)
		claim(c)
		if err := s.Complete(ctx, c.Identity, c.Token, resp); err != nil {
			t.Fatal(err)
		}
		res, tx, err := s.ClaimTx(ctx, claimFor(key+"-tx", "warm", time.Minute))
		if err != nil || !res.Won {
			t.Fatalf("warm ClaimTx: %+v %v", res, err)
		}
		if err := tx.Commit(ctx, resp); err != nil {
			t.Fatal(err)
		}
		if _, tx, err := s.ClaimTx(ctx, claimFor(key+"-tx", "warm2", time.Minute)); err != nil || tx != nil {
			t.Fatalf("warm lost ClaimTx: %v", err)
		}
	}
	warm("warm")

	type step struct {
		name             string
		do               func()
		queries, batches int64
		writes           int64
	}
	mismatch := claimFor("k1", "tok-m", time.Minute)
	mismatch.Fingerprint = []byte("another request")
	var tx idemstore.Tx
	steps := []step{
		{"claim (new key)", func() { mustWon(t, claim(claimFor("k1", "tok1", time.Minute))) }, 1, 0, 1},
		{"claim (in flight)", func() { mustLost(t, claim(claimFor("k1", "tok2", time.Minute))) }, 1, 0, 1},
		{"completion", func() {
			if err := s.Complete(ctx, claimFor("k1", "", 0).Identity, "tok1", resp); err != nil {
				t.Fatal(err)
			}
		}, 1, 0, 1},
		{"replay", func() { mustLost(t, claim(claimFor("k1", "tok3", time.Minute))) }, 1, 0, 1},
		{"conflict (fingerprint mismatch)", func() { mustLost(t, claim(mismatch)) }, 1, 0, 1},
		{"ClaimTx (won)", func() {
			var res idemstore.Result
			var err error
			res, tx, err = s.ClaimTx(ctx, claimFor("k2", "tok1", time.Minute))
			if err != nil || !res.Won {
				t.Fatalf("ClaimTx = %+v, %v", res, err)
			}
		}, 2, 1, 3},
		// The query is pgx's own Commit of its transaction object, made
		// with a context that is already done so that pgx marks the object
		// closed and sends nothing; the ending itself is sent as protocol
		// messages of pgstore's own, which pgx's tracer does not see: the
		// socket writes are what count.
		{"Tx.Commit (completion + COMMIT)", func() {
			if err := tx.Commit(ctx, resp); err != nil {
				t.Fatal(err)
			}
		}, 2, 0, 2},
		// The completed row is read, outside a transaction, and answers.
		{"ClaimTx (replay: one read)", func() {
			res, tx, err := s.ClaimTx(ctx, claimFor("k2", "tok2", time.Minute))
			if err != nil || res.Won || tx != nil {
				t.Fatalf("ClaimTx = %+v, %v", res, err)
			}
		}, 1, 0, 1},
	}
	quiet := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !pgstore.GuardQuiet(s); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the guard did not go quiet")
			}
		}
	}
	for _, st := range steps {
		quiet()
		before := rt.snap()
		st.do()
		quiet()
		got := rt.snap().sub(before)
		t.Logf("%-38s queries %d, batches %d, socket writes %d", st.name, got.queries, got.batches, got.writes)
		if got.queries != st.queries || got.batches != st.batches || got.writes != st.writes {
			t.Errorf("%s: queries %d, batches %d, socket writes %d; want %d, %d, %d",
				st.name, got.queries, got.batches, got.writes, st.queries, st.batches, st.writes)
		}
	}
}

func mustWon(t *testing.T, res idemstore.Result) {
	t.Helper()
	if !res.Won {
		t.Fatalf("lost against %+v, want won", res.Existing)
	}
}

func mustLost(t *testing.T, res idemstore.Result) {
	t.Helper()
	if res.Won {
		t.Fatal("won, want lost")
	}
}

var _ idemstore.Transactor = (*pgstore.Store)(nil)
