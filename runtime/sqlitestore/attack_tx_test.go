package sqlitestore_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// These tests attack the store from outside, as a user's handler and the
// engine's own calling pattern would treat it.

// attackEngine is an engine with one transactional createTransfer on s,
// whose key is optional, over a table of effects.
func attackEngine(t *testing.T, s *sqlitestore.Store, handler http.Handler) http.Handler {
	t.Helper()
	return attackEngineLease(t, s, 30*time.Second, handler)
}

// attackEngineLease is attackEngine with the policy's lease.
func attackEngineLease(t *testing.T, s *sqlitestore.Store, lease time.Duration, handler http.Handler) http.Handler {
	t.Helper()
	return attackEngineTenant(t, s, lease, func(*http.Request) (string, bool) { return "t1", true }, handler)
}

// attackEngineTenant is attackEngineLease with the engine's tenant.
func attackEngineTenant(t *testing.T, s *sqlitestore.Store, lease time.Duration, tenant func(*http.Request) (string, bool), handler http.Handler) http.Handler {
	t.Helper()
	if _, err := s.DB().ExecContext(context.Background(), `CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	e, err := idem.New(idem.Config{
		Store: s,
		Policies: []idem.Policy{idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) {
			p.Required, p.TTL, p.Lease = false, time.Hour, lease
			p.OnLeaseExpiry, p.Transactional = idemstore.Takeover, true
		})},
		Tenant: tenant,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e.Middleware(handler)
}

func countMarker(t *testing.T, s *sqlitestore.Store, marker string) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM effects WHERE marker = ?`, marker).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func postAttack(h http.Handler, key string) *httptest.ResponseRecorder {
	return postAs(h, "", key, "")
}

// A transactional operation whose key is optional runs a keyless request
// in a plain transaction (Transactor.Begin). The engine begins it under a
// store context that it cancels as soon as Begin returns; database/sql
// rolls back a transaction whose context is done, so on SQLite the
// handler's transaction was dead before the handler ran: its write failed
// (or was rolled back) and the request ended 503 or 500, never 201.
func TestAttackKeylessTransactionOutlivesBegin(t *testing.T) {
	s := openStore(t)
	h := attackEngine(t, s, idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
		// A moment, as any real handler takes, for the cancelled context to
		// be noticed.
		time.Sleep(20 * time.Millisecond)
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO effects (marker) VALUES ('keyless')`); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	w := postAttack(h, "")
	if w.Code != http.StatusCreated {
		t.Fatalf("keyless transactional request = %d %s, want 201", w.Code, w.Body)
	}
	if n := countMarker(t, s, "keyless"); n != 1 {
		t.Fatalf("keyless effects = %d, want 1", n)
	}
}

// Once a transactional handler has been seen writing without its
// transaction, the engine commits each claim before the handler and hands
// the handler a plain transaction from Begin (serveDurableTx). On SQLite
// that transaction was rolled back as soon as Begin returned, so its commit
// failed after the handler had written through the pool: the client was
// told 503 "did not process the request" for a request whose effect had
// happened. Whatever the answer, it must agree with what happened.
func TestAttackDurableModeAnswersWhatHappened(t *testing.T) {
	s := openStore(t)
	h := attackEngine(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The wiring mistake: a transactional operation mounted as a plain
		// handler that writes through the pool. Its write may meet the
		// write lock of a transaction the engine holds; a short wait keeps
		// the test fast.
		ctx, cancel := context.WithTimeout(r.Context(), 300*time.Millisecond)
		defer cancel()
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO effects (marker) VALUES (?)`, r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for _, key := range []string{"first", "second", "third"} {
		w := postAttack(h, key)
		n := countMarker(t, s, key)
		switch {
		case n > 1:
			t.Fatalf("%s: %d effects", key, n)
		case n == 1 && w.Code != http.StatusCreated:
			t.Fatalf("%s: the effect happened, but the client was told %d %s", key, w.Code, w.Body)
		case n == 0 && w.Code < 300:
			t.Fatalf("%s: no effect, but the client was told %d", key, w.Code)
		}
		if n == 1 {
			again := postAttack(h, key)
			if again.Header().Get("Idempotent-Replayed") != "true" || countMarker(t, s, key) != 1 {
				t.Fatalf("%s: retry = %d %s, want a replay and still one effect", key, again.Code, again.Body)
			}
		}
	}
}

// A transactional operation whose handler was seen not taking its
// transaction is served in durable mode: its claim commits on its own
// before the handler runs. The handler's transaction must not exist until
// the handler asks for it: on SQLite a transaction begins IMMEDIATE and
// holds the database's only write lock, and the handler, which by
// definition writes around that transaction, would wait for that lock on
// its own pool connection until the busy timeout, failing every request
// of the operation.
func TestAttackDurableModeHandlerWritesThroughThePool(t *testing.T) {
	// A short busy timeout makes a failure quick; the pool write must
	// not need to wait at all.
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := sql.Open("sqlite", path+"?_txlock=immediate&_pragma=busy_timeout(250)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s := sqlitestore.New(db)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := attackEngine(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The wiring mistake: a transactional operation mounted as a plain
		// handler. Its first request writes nothing, so that it completes
		// while the engine still holds the claim in the transaction; the
		// engine then flags the operation.
		key := r.Header.Get("Idempotency-Key")
		if key != "flag" {
			if _, err := s.DB().ExecContext(r.Context(), `INSERT INTO effects (marker) VALUES (?)`, key); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, key)
	}))
	if w := postAttack(h, "flag"); w.Code != http.StatusCreated {
		t.Fatalf("flagging request = %d %s, want 201", w.Code, w.Body)
	}
	for _, key := range []string{"pool-1", "pool-2"} {
		w := postAttack(h, key)
		if w.Code != http.StatusCreated || w.Body.String() != key {
			t.Fatalf("%s in durable mode = %d %s, want 201 %s", key, w.Code, w.Body, key)
		}
		if n := countMarker(t, s, key); n != 1 {
			t.Fatalf("%s: %d effects, want 1", key, n)
		}
		again := postAttack(h, key)
		if again.Header().Get("Idempotent-Replayed") != "true" || again.Code != http.StatusCreated || again.Body.String() != key {
			t.Fatalf("%s: retry = %d %s (replayed %q), want the 201 replayed", key, again.Code, again.Body, again.Header().Get("Idempotent-Replayed"))
		}
		if n := countMarker(t, s, key); n != 1 {
			t.Fatalf("%s: %d effects after the retry, want 1", key, n)
		}
	}
}

// A handler that keeps a statement prepared in its transaction and uses it
// after returning cannot write: the statement ends with the transaction.
func TestAttackPreparedStatementDiesWithTheTransaction(t *testing.T) {
	s := openStore(t)
	stmts := make(chan *preparedLeak, 1)
	h := attackEngine(t, s, idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
		st, err := tx.PrepareContext(r.Context(), `INSERT INTO effects (marker) VALUES (?)`)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		stmts <- &preparedLeak{exec: func(m string) error { _, err := st.ExecContext(context.Background(), m); return err }}
		w.WriteHeader(http.StatusCreated)
	}))
	if w := postAttack(h, "k1"); w.Code != http.StatusCreated {
		t.Fatalf("request = %d %s", w.Code, w.Body)
	}
	leak := <-stmts
	if err := leak.exec("late"); err == nil {
		t.Fatalf("a statement kept from the handler's transaction wrote after the commit")
	}
	if n := countMarker(t, s, "late"); n != 0 {
		t.Fatalf("late effects = %d, want 0", n)
	}
}

type preparedLeak struct{ exec func(marker string) error }

// A handler that ends its transaction with a raw statement, in any of the
// spellings SQLite takes, alone or followed by a BEGIN that would leave
// the connection in a new transaction the engine did not begin, is
// refused by the connection's authorizer: the transaction stays the
// engine's.
func TestAttackRawTransactionStatementsAreRefused(t *testing.T) {
	for _, stmt := range []string{"COMMIT", "END", "ROLLBACK", "commit transaction", "BEGIN", "ROLLBACK TRANSACTION", "COMMIT; BEGIN", "END; BEGIN IMMEDIATE", "ROLLBACK; BEGIN"} {
		t.Run(stmt, func(t *testing.T) {
			s := openStore(t)
			h := attackEngine(t, s, idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
				if _, err := tx.ExecContext(r.Context(), `INSERT INTO effects (marker) VALUES ('before')`); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				if _, err := tx.ExecContext(r.Context(), stmt); err == nil {
					w.WriteHeader(http.StatusCreated)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			if w := postAttack(h, "k1"); w.Code != http.StatusCreated {
				t.Fatalf("request = %d %s", w.Code, w.Body)
			}
			again := postAttack(h, "k1")
			if again.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry = %d %s, want a replay", again.Code, again.Body)
			}
			if n := countMarker(t, s, "before"); n != 1 {
				t.Fatalf("effects = %d, want 1", n)
			}
		})
	}
}

// A transaction from Begin (a keyless request, or one in durable mode)
// refuses raw transaction statements as a held one does: a handler that
// could COMMIT it would keep writes that the engine then rolls back and
// releases, for a retry to repeat.
func TestAttackRawTransactionStatementsAreRefusedInBegin(t *testing.T) {
	for _, stmt := range []string{"COMMIT", "END", "ROLLBACK", "BEGIN", "COMMIT; BEGIN", "ROLLBACK; BEGIN"} {
		t.Run(stmt, func(t *testing.T) {
			s := openStore(t)
			ctx := context.Background()
			if _, err := s.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS effects (marker TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			tx, err := s.Begin(ctx, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			h := tx.Driver().(*sqlitestore.Tx)
			if _, err := h.ExecContext(ctx, `INSERT INTO effects (marker) VALUES ('begun')`); err != nil {
				t.Fatal(err)
			}
			if _, err := h.ExecContext(ctx, stmt); err == nil {
				t.Errorf("%s through a Begin transaction was accepted", stmt)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if n := countMarker(t, s, "begun"); n != 0 {
				t.Fatalf("effects after Release = %d, want 0", n)
			}
		})
	}
}

// Past the lease the authorizer lets database/sql's own ROLLBACK through,
// and only that: a handler statement still running when the lease ends
// holds the rollback back until it finishes, and a COMMIT at its end
// would otherwise make the writes durable that the engine reports as
// rolled back (a keyless request's 503, a held claim's takeover).
func TestAttackCommitPastTheLeaseIsRefused(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const lease = 20 * time.Millisecond
	// The lease runs from within Begin, so a statement ended by it has
	// run for at least the lease since start.
	start := time.Now()
	tx, h := beginWithEffects(t, s, lease)
	// One call, three statements: the write, a query that outlasts the
	// lease, then COMMIT.
	_, _ = h.ExecContext(ctx, `INSERT INTO effects (marker) VALUES ('late');
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT count(*) FROM c;
COMMIT`)
	if took := time.Since(start); took <= lease {
		t.Skipf("the slow query took %v, within the %v lease", took, lease)
	}
	if err := tx.Commit(ctx, idemstore.Response{}); err == nil {
		t.Fatal("Commit after the lease succeeded")
	}
	if n := countMarker(t, s, "late"); n != 0 {
		t.Fatalf("effects after the lease = %d, want 0: the handler's COMMIT got through", n)
	}
}

// In durable mode the handler writes around its transaction, and may
// write through it too (it asks for it). When that transaction cannot
// commit, because the handler outlived its lease, the writes made around
// it stand: the client must not be told that the request was not
// processed, nor may a retry run it again.
func TestAttackDurableModeCommitFailureIsNoRefusal(t *testing.T) {
	s := openStore(t)
	const lease = 300 * time.Millisecond
	h := attackEngineLease(t, s, lease, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "flag" {
			// Answers without taking its transaction: the engine switches
			// the operation to durable mode.
			w.WriteHeader(http.StatusCreated)
			return
		}
		if _, err := s.DB().ExecContext(r.Context(), `INSERT INTO effects (marker) VALUES (?)`, key+"-pool"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		tx, ok := idem.TxFrom[*sqlitestore.Tx](r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO effects (marker) VALUES (?)`, key+"-tx"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		time.Sleep(lease + 200*time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	}))
	if w := postAttack(h, "flag"); w.Code != http.StatusCreated {
		t.Fatalf("flagging request = %d %s", w.Code, w.Body)
	}
	// A keyless request has no key to hold, but its answer must be as
	// true: not a 503 that invites the client to send it again.
	if w := postAttack(h, ""); countMarker(t, s, "-pool") != 1 || w.Code == http.StatusServiceUnavailable || w.Code < 300 {
		t.Fatalf("keyless: a write happened and one was rolled back, but the client was told %d %s", w.Code, w.Body)
	}
	w := postAttack(h, "slow")
	if countMarker(t, s, "slow-pool") != 1 {
		t.Fatalf("the handler's write around its transaction did not happen: %d %s", w.Code, w.Body)
	}
	if w.Code == http.StatusServiceUnavailable || w.Code < 300 {
		t.Fatalf("a write happened and one was rolled back, but the client was told %d %s", w.Code, w.Body)
	}
	again := postAttack(h, "slow")
	if n := countMarker(t, s, "slow-pool"); n != 1 || again.Code < 300 {
		t.Fatalf("retry = %d %s with %d effects; want no second run and no success", again.Code, again.Body, n)
	}
}

// Past the lease the authorizer lets ROLLBACK through, whoever sends it.
// A handler statement list still running at the deadline could then end
// the transaction with its own ROLLBACK and go on writing in autocommit
// mode: writes durable at once, while the engine reports the transaction
// rolled back and a retry may run the request again.
func TestAttackWritesAfterRollbackPastTheLeaseAreRefused(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const lease = 20 * time.Millisecond
	start := time.Now() // before Begin, where the lease starts
	tx, h := beginWithEffects(t, s, lease)
	_, _ = h.ExecContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT count(*) FROM c;
ROLLBACK;
INSERT INTO effects (marker) VALUES ('escaped')`)
	if took := time.Since(start); took <= lease {
		t.Skipf("the slow query took %v, within the %v lease", took, lease)
	}
	_ = tx.Commit(ctx, idemstore.Response{})
	if n := countMarker(t, s, "escaped"); n != 0 {
		t.Fatalf("effects after the lease = %d, want 0: a write after the handler's ROLLBACK got through", n)
	}
}

// beginWithEffects makes sure s has the effects table and begins a keyless
// transaction of the given lease; it returns the transaction and the
// handler's view of it.
func beginWithEffects(t *testing.T, s *sqlitestore.Store, lease time.Duration) (idemstore.Tx, *sqlitestore.Tx) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	return tx, tx.Driver().(*sqlitestore.Tx)
}
