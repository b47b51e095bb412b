package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// slowInsert writes many rows, long enough for a cancel to interrupt it
// half-way.
const slowInsert = `INSERT INTO effects (marker)
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000000)
SELECT 'interrupted' FROM c`

// interruptedHandler claims key in transactional mode and runs slowInsert
// in the handler's transaction under a context that is cancelled while it
// runs, as a handler running its statements under a request's context is
// when the client hangs up. SQLite, interrupted in the middle of a write
// in a transaction, rolls the whole transaction back on its own.
func interruptedHandler(t *testing.T, s *sqlitestore.Store, key string) (idemstore.Tx, *sqlitestore.Tx) {
	t.Helper()
	return interruptedAfter(t, s, key, func(*sqlitestore.Tx) {})
}

// interruptedAfter is interruptedHandler, with before run in the
// transaction ahead of the interrupted statement.
func interruptedAfter(t *testing.T, s *sqlitestore.Store, key string, before func(*sqlitestore.Tx)) (idemstore.Tx, *sqlitestore.Tx) {
	t.Helper()
	if _, err := s.DB().Exec(`CREATE TABLE IF NOT EXISTS effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	res, tx, err := s.ClaimTx(context.Background(), ownerClaim(key, "tok-"+key, idemstore.Takeover))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v", res, err)
	}
	h := tx.Driver().(*sqlitestore.Tx)
	before(h)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := h.ExecContext(ctx, slowInsert); err == nil {
		t.Skip("the slow insert finished before it was cancelled")
	}
	return tx, h
}

// A release after SQLite ended the transaction on its own succeeds: the
// handler's writes are gone, the claim is deleted, and the retry runs as a
// first request.
func TestReleaseAfterAnInterruptedStatement(t *testing.T) {
	s := openStore(t)
	tx, _ := interruptedHandler(t, s, "k")
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatalf("Release = %v, want the claim released", err)
	}
	if n := countMarker(t, s, "interrupted"); n != 0 {
		t.Errorf("%d rows of the interrupted statement stand", n)
	}
	res, err := s.Claim(context.Background(), ownerClaim("k", "tok-retry", idemstore.Takeover))
	if err != nil || !res.Won || res.TookOver {
		t.Errorf("retry = %+v, %v; want a first claim of the released key", res, err)
	}
}

// Once SQLite has ended the transaction, a statement the handler runs
// next would run on its own and commit at once, outside the claim's
// transaction: a write the release could not undo, for the retry to
// repeat. It is refused, and so is the completion.
func TestNoWriteCommitsAfterTheTransactionEnded(t *testing.T) {
	for _, end := range []string{"release", "commit"} {
		t.Run(end, func(t *testing.T) {
			s := openStore(t)
			tx, h := interruptedHandler(t, s, "k")
			if _, err := h.ExecContext(context.Background(), `INSERT INTO effects (marker) VALUES ('after')`); err == nil {
				t.Error("a write after SQLite ended the transaction was accepted")
			}
			var n int
			if err := h.QueryRowContext(context.Background(), `SELECT count(*) FROM effects`).Scan(&n); err == nil {
				t.Error("a read after SQLite ended the transaction was accepted; it reads outside the transaction")
			}
			endInterrupted(t, s, tx, end)
			if n := countMarker(t, s, "after"); n != 0 {
				t.Errorf("%d writes made after the transaction ended stand", n)
			}
		})
	}
}

// A statement the handler prepared before SQLite ended the transaction is
// not prepared again, so no authorizer sees it run: its write must not
// commit either.
func TestNoPreparedWriteCommitsAfterTheTransactionEnded(t *testing.T) {
	s := openStore(t)
	var stmt *sql.Stmt
	tx, _ := interruptedAfter(t, s, "k", func(h *sqlitestore.Tx) {
		var err error
		if stmt, err = h.PrepareContext(context.Background(), `INSERT INTO effects (marker) VALUES ('prepared')`); err != nil {
			t.Fatal(err)
		}
	})
	_, _ = stmt.ExecContext(context.Background())
	endInterrupted(t, s, tx, "release")
	if n := countMarker(t, s, "prepared"); n != 0 {
		t.Errorf("%d writes of a statement prepared before the transaction ended stand", n)
	}
}

// endInterrupted ends tx, which SQLite rolled back, by end ("commit" or
// "release"): a commit fails and a release succeeds, and either way the
// claim is released, so that the retry runs as a first request.
func endInterrupted(t *testing.T, s *sqlitestore.Store, tx idemstore.Tx, end string) {
	t.Helper()
	if end == "commit" {
		if err := tx.Commit(context.Background(), idemstore.Response{Status: 201}); err == nil {
			t.Error("Commit of a transaction SQLite ended = nil, want an error")
		}
	} else if err := tx.Rollback(context.Background()); err != nil {
		t.Errorf("Release = %v", err)
	}
	res, err := s.Claim(context.Background(), ownerClaim("k", "tok-retry", idemstore.Takeover))
	if err != nil || !res.Won || res.TookOver {
		t.Errorf("retry = %+v, %v; want a first claim of the released key", res, err)
	}
}

// The service of the report: a transactional handler runs its statements
// under the request's context, and its client hangs up while one runs. The
// handler fails (500, not stored), the engine releases the claim, and the
// log says nothing of a claim left held: the retry runs the handler again
// at once, and only its write stands.
func TestClientHangUpDuringAStatementReleasesTheClaim(t *testing.T) {
	s := openStore(t)
	var logs syncBuffer
	e, err := idem.New(idem.Config{
		Store: s,
		Policies: []idem.Policy{idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) {
			p.TTL, p.Lease = time.Hour, time.Minute
			p.OnLeaseExpiry, p.Transactional = idemstore.FailClosed, true
		})},
		Tenant: idem.SingleTenant("t1"),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(`CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := e.Middleware(idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
		runs++
		query := `INSERT INTO effects (marker) VALUES ('retry')`
		if runs == 1 {
			query = slowInsert
		}
		if _, err := tx.ExecContext(r.Context(), query); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	ctx, hangUp := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, hangUp)
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount":1}`)).WithContext(ctx)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if strings.Contains(logs.String(), "not released") {
		t.Errorf("the claim was not released:\n%s", logs.String())
	}
	if w := postAttack(h, "k"); w.Code != http.StatusCreated || runs != 2 {
		t.Errorf("retry = %d %s after %d runs, want 201 from a second run", w.Code, w.Body, runs)
	}
	if n, m := countMarker(t, s, "interrupted"), countMarker(t, s, "retry"); n != 0 || m != 1 {
		t.Errorf("effects: %d of the interrupted run, %d of the retry; want 0 and 1", n, m)
	}
}

// syncBuffer is a bytes.Buffer that a logger and a test may use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
