package idem_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// strictHandler has the shape of an oapi-codegen strict-server method: it
// gets the request's context and its decoded body, never the request, so
// TxHandler cannot hand it the transaction.
type strictHandler func(ctx context.Context, amount int) (status int, err error)

// serveStrict stands in for the strict server's generated glue: decode,
// call, and answer an error with a 500, as its default error handler does.
func serveStrict(h strictHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Amount int }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		status, err := h(r.Context(), in.Amount)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(status)
	})
}

// sqliteTxEngine is an engine with a transactional createTransfer on a
// SQLite store that also holds a transfers table.
func sqliteTxEngine(t *testing.T) (*idem.Engine, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE transfers (amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	p := transferPolicy()
	p.Transactional = true
	p.OnLeaseExpiry = idemstore.Takeover
	eng, err := idem.New(idem.Config{
		Store:    s,
		Policies: []idem.Policy{p},
		Tenant:   func(*http.Request) (string, bool) { return "t1", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	return eng, s.DB()
}

func postTransfer(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func countTransfers(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM transfers`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A strict-server method reaches the request's transaction through TxFor:
// its write commits with the key, and a retry replays instead of writing
// again.
func TestTxForGivesAStrictHandlerItsTransaction(t *testing.T) {
	eng, db := sqliteTxEngine(t)
	runs := 0
	h := eng.Middleware(serveStrict(func(ctx context.Context, amount int) (int, error) {
		runs++
		tx, err := idem.TxFor[*sqlitestore.Tx](ctx, "createTransfer")
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO transfers (amount) VALUES (?)`, amount); err != nil {
			return 0, err
		}
		return http.StatusCreated, nil
	}))
	if w := postTransfer(h, "k1"); w.Code != http.StatusCreated {
		t.Fatalf("first request: status %d, body %s", w.Code, w.Body)
	}
	w := postTransfer(h, "k1")
	if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: status %d, Idempotent-Replayed %q; want a replayed 201", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times, want 1", runs)
	}
	if n := countTransfers(t, db); n != 1 {
		t.Fatalf("%d transfers written, want 1", n)
	}
}

// Asking for another store's transaction type fails with ErrNoTx naming
// the type the store holds; the handler writes nothing, its 500 is not
// stored, and a retry runs again.
func TestTxForRefusesAnotherStoresType(t *testing.T) {
	eng, db := sqliteTxEngine(t)
	var got error
	h := eng.Middleware(serveStrict(func(ctx context.Context, amount int) (int, error) {
		_, err := idem.TxFor[*sql.Conn](ctx, "createTransfer")
		got = err
		return 0, err
	}))
	if w := postTransfer(h, "k2"); w.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", w.Code)
	}
	if !errors.Is(got, idem.ErrNoTx) || !strings.Contains(got.Error(), "*sql.Conn") || !strings.Contains(got.Error(), "*sqlitestore.Tx") {
		t.Fatalf("error %v: want ErrNoTx naming *sql.Conn and *sqlitestore.Tx", got)
	}
	if w := postTransfer(h, "k2"); w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatal("a handler's 500 was stored and replayed")
	}
	if n := countTransfers(t, db); n != 0 {
		t.Fatalf("%d transfers written, want 0", n)
	}
}

// Without the engine's values in the context there is no transaction:
// ErrNoTx, naming the operation and both causes, the engine missing and a
// framework context that hides the request's values (gin's, which passes
// them on only with ContextWithFallback).
func TestTxForWithoutTheEngine(t *testing.T) {
	_, err := idem.TxFor[*sqlitestore.Tx](context.Background(), "createTransfer")
	if !errors.Is(err, idem.ErrNoTx) || !strings.Contains(err.Error(), "createTransfer") ||
		!strings.Contains(err.Error(), "not mounted") || !strings.Contains(err.Error(), "ContextWithFallback") {
		t.Fatalf("error %v: want ErrNoTx naming createTransfer, a missing engine and gin's ContextWithFallback", err)
	}
}

// hidingContext stands for a framework's own context that does not pass the
// request's values on, as gin's *gin.Context without ContextWithFallback.
type hidingContext struct{ context.Context }

func (hidingContext) Value(any) any { return nil }

// Behind the engine, a context that hides the request's values gets the
// framework's cause; the request's own context gets the transaction; and an
// operation the engine protects without a transaction is named as such, not
// as an engine missing from in front of it.
func TestTxForNamesWhyItFoundNone(t *testing.T) {
	eng, _ := sqliteTxEngine(t)
	var hidden, own error
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, hidden = idem.TxFor[*sqlitestore.Tx](hidingContext{r.Context()}, "createTransfer")
		_, own = idem.TxFor[*sqlitestore.Tx](r.Context(), "createTransfer")
		w.WriteHeader(http.StatusBadRequest)
	}))
	postTransfer(h, "k1")
	if !errors.Is(hidden, idem.ErrNoTx) || !strings.Contains(hidden.Error(), "ContextWithFallback") {
		t.Errorf("hidden values: %v, want ErrNoTx naming ContextWithFallback", hidden)
	}
	if own != nil {
		t.Errorf("the request's context: %v, want its transaction", own)
	}

	p := transferPolicy()
	plain := newEngine(t, idem.Config{Policies: []idem.Policy{p}})
	var notTx error
	h = plain.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, notTx = idem.TxFor[*sqlitestore.Tx](r.Context(), "createTransfer")
		w.WriteHeader(http.StatusBadRequest)
	}))
	postTransfer(h, "k2")
	if !errors.Is(notTx, idem.ErrNoTx) || !strings.Contains(notTx.Error(), "without a transaction") {
		t.Errorf("a policy that is not transactional: %v, want ErrNoTx saying so", notTx)
	}
}
