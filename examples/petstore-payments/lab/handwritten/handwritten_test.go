package handwritten

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
)

// testPool is a pool on a schema of the test's own, dropped at its end;
// without IDEMGEN_TEST_DATABASE_URL the test is skipped.
func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	base := os.Getenv("IDEMGEN_TEST_DATABASE_URL")
	if base == "" {
		t.Skip("IDEMGEN_TEST_DATABASE_URL is unset; set it to a PostgreSQL URL to run the hand-written table's tests")
	}
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "handwritten_" + hex.EncodeToString(b)
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE") })
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// post sends h a POST under the key k1 and returns the answer.
func post(h http.Handler) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/op", strings.NewReader("{}"))
	r.Header.Set("Idempotency-Key", "k1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A replay carries the headers the handler set byte for byte, bytes that
// are not UTF-8 and several values of one name included, with the status
// and body, and the handler ran once.
func TestReplayKeepsHeadersByteExact(t *testing.T) {
	pool := testPool(t)
	raw := "caf\xe9 \xff\xfe, {\"a\":\"<b>\"}"
	runs := 0
	h := Mount(pool)("op", func(w http.ResponseWriter, _ *http.Request, _ ledger.DB) {
		runs++
		w.Header()["X-Raw"] = []string{raw, "second"}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("\x00body\xff"))
	})
	first, again := post(h), post(h)
	if runs != 1 {
		t.Fatalf("the handler ran %d times for one key, want once", runs)
	}
	for _, w := range []*httptest.ResponseRecorder{first, again} {
		if w.Code != http.StatusCreated || w.Body.String() != "\x00body\xff" {
			t.Errorf("answered %d %q, want 201 and the handler's body", w.Code, w.Body.String())
		}
	}
	if got := again.Header()["X-Raw"]; len(got) != 2 || got[0] != raw || got[1] != "second" {
		t.Errorf("replayed X-Raw %q, want %q and \"second\"", got, raw)
	}
	if again.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("the replay is not marked Idempotent-Replayed")
	}
}

// A replay reads the completed row with a plain SELECT: it neither opens a
// transaction nor waits on the row's lock, here held by another
// transaction.
func TestReplayDoesNotWaitOnTheRowLock(t *testing.T) {
	pool := testPool(t)
	h := Mount(pool)("op", func(w http.ResponseWriter, _ *http.Request, _ ledger.DB) {
		w.WriteHeader(http.StatusCreated)
	})
	if code := post(h).Code; code != http.StatusCreated {
		t.Fatalf("first request answered %d, want 201", code)
	}
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT FROM handwritten_idempotency_keys WHERE key = 'k1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	answered := make(chan int, 1)
	go func() { answered <- post(h).Code }()
	select {
	case code := <-answered:
		if code != http.StatusCreated {
			t.Errorf("the replay answered %d, want 201", code)
		}
	case <-time.After(10 * time.Second):
		_ = tx.Rollback(ctx)
		<-answered
		t.Fatal("the replay waited on the row's lock")
	}
}

// A duplicate that comes while the first request's handler runs waits on
// the first transaction's insert of the key, and once that commits,
// replays its answer: the handler runs once.
func TestDuplicateWaitsForTheFirstAndReplays(t *testing.T) {
	pool := testPool(t)
	release := make(chan struct{})
	var runs atomic.Int32
	h := Mount(pool)("op", func(w http.ResponseWriter, _ *http.Request, _ ledger.DB) {
		if runs.Add(1) == 1 {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("first"))
	})
	send := func(answered chan<- *httptest.ResponseRecorder) { answered <- post(h) }
	first, dup := make(chan *httptest.ResponseRecorder, 1), make(chan *httptest.ResponseRecorder, 1)
	go send(first)
	for deadline := time.Now().Add(10 * time.Second); runs.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request's handler did not start")
		}
	}
	go send(dup)
	// The duplicate's insert waits on the first's row.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting bool
		err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity
		    WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO handwritten_idempotency_keys%')`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the duplicate never waited on the first request's insert")
		}
	}
	close(release)
	a, b := <-first, <-dup
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
	if a.Code != http.StatusCreated || b.Code != http.StatusCreated || b.Body.String() != "first" || b.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("first answered %d %q, the duplicate %d %q (replayed %q); want 201, then its replay",
			a.Code, a.Body.String(), b.Code, b.Body.String(), b.Header().Get("Idempotent-Replayed"))
	}
}
