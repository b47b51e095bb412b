package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
)

// cancelDB is a ledger.DB whose statements fail with their context's
// error once it is done, as the drivers' do; it counts the writes it took.
type cancelDB struct{ writes int }

func (d *cancelDB) Exec(ctx context.Context, _ string, _ ...any) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.writes++
	return 1, nil
}

func (d *cancelDB) QueryRow(ctx context.Context, _ string, _ ...any) ledger.Row {
	return errRow{ctx.Err()}
}

func (d *cancelDB) Query(ctx context.Context, _ string, _ ...any) (ledger.Rows, error) {
	return nil, ctx.Err()
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// goneServer is a server over db that logs at every level into logs.
func goneServer(t *testing.T, db ledger.DB, logs *bytes.Buffer) *Server {
	t.Helper()
	s, err := New(Config{
		Ledger: ledger.New(ledger.SQLite),
		Conn:   db,
		Begin:  func(context.Context) (*database.Tx, error) { return nil, errors.New("no transactions here") },
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// goneRequest is a request of tenant acme whose client has hung up.
func goneRequest(method, path, body string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	ctx, cancel := context.WithCancel(context.WithValue(r.Context(), tenantKey{}, "acme"))
	cancel()
	return r.WithContext(ctx)
}

// A write whose client hangs up is finished, not cut off: cut off, an
// insert that commits on its own may have committed or not, and its 500
// released the key's claim for the retry to write it again. It was also
// logged as an error, for an ordinary client timeout.
func TestAWriteOutlivesItsClient(t *testing.T) {
	for _, c := range []struct{ path, body string }{
		{"/accounts", `{"owner":"o","currency":"EUR","initial_balance":1}`},
		{"/pets", `{"name":"n","species":"cat"}`},
	} {
		var logs bytes.Buffer
		db := &cancelDB{}
		s := goneServer(t, db, &logs)
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, goneRequest("POST", c.path, c.body))
		if w.Code != http.StatusCreated || db.writes != 1 {
			t.Errorf("POST %s after its client left: %d with %d writes, want 201 and the write done: %s", c.path, w.Code, db.writes, w.Body)
		}
		if strings.Contains(logs.String(), "level=ERROR") || strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("POST %s after its client left logged:\n%s", c.path, logs.String())
		}
	}
}

// A read whose client hangs up ends with it, at DEBUG: an operator has
// nothing to do about a client's timeout.
func TestAReadWhoseClientLeftIsNoError(t *testing.T) {
	var logs bytes.Buffer
	s := goneServer(t, &cancelDB{}, &logs)
	w := httptest.NewRecorder()
	s.api.ServeHTTP(w, goneRequest("GET", "/accounts/acc_1", ""))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "client-gone") {
		t.Errorf("GET after its client left: %d %s, want 503 client-gone", w.Code, w.Body)
	}
	if got := logs.String(); !strings.Contains(got, "level=DEBUG") || strings.Contains(got, "level=ERROR") {
		t.Errorf("GET after its client left logged %q, want one DEBUG line and no error", got)
	}
}
