package sqlitestore_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// A retry that arrives while its own key's transaction holds SQLite's
// write lock, its first attempt's client gone mid-handler, is answered
// from that transaction's commit when Config.DuplicateWait lets it wait:
// it claims again once the claim ends, reads the committed answer without
// the lock and replays it, and the handler runs once. Without the wait the
// same retry is answered 409, and its client comes back after a backoff
// (docs/benchmarks.md, "SQLite's one writer").
func TestRetryDuringItsTransactionIsAnsweredFromItsCommit(t *testing.T) {
	for _, c := range []struct {
		wait time.Duration
		want int
	}{{0, http.StatusConflict}, {5 * time.Second, http.StatusCreated}} {
		var runs atomic.Int64
		entered := make(chan struct{}, 1)
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			tx, ok := idem.TxFrom[*sqlitestore.Tx](r.Context())
			if !ok {
				t.Error("the handler has no transaction")
				return
			}
			var one int
			if err := tx.QueryRowContext(context.WithoutCancel(r.Context()), "SELECT 1").Scan(&one); err != nil {
				t.Error(err)
			}
			entered <- struct{}{}
			// The pause inside the transaction, which its client does not
			// wait out.
			time.Sleep(500 * time.Millisecond)
			enginetest.Created(w, r.Header.Get("Idempotency-Key"))
		})
		engine, err := idem.New(idem.Config{
			Store:         openStore(t),
			Policies:      []idem.Policy{enginetest.EnginePolicy("createTransfer", "/transfers", time.Minute, idemstore.Takeover, true)},
			Tenant:        func(*http.Request) (string, bool) { return "acme", true },
			DuplicateWait: c.wait,
			Logger:        slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(engine.Middleware(handler))
		gone, leave := context.WithCancel(context.Background())
		go func() {
			<-entered
			leave()
		}()
		if _, err := post(gone, srv.URL, "k"); err == nil {
			t.Fatal("the first attempt was answered; its client should have left first")
		}
		res, err := post(context.Background(), srv.URL, "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != c.want || (c.want == http.StatusCreated && res.Header.Get("Idempotent-Replayed") != "true") {
			t.Errorf("duplicate wait %v: the retry during its key's transaction got %d %v, want %d (a replay when 201)", c.wait, res.StatusCode, res.Header, c.want)
		}
		srv.Close()
		if n := runs.Load(); n != 1 {
			t.Errorf("duplicate wait %v: the handler ran %d times, want 1", c.wait, n)
		}
	}
}

// post sends a transfer under key and reads its answer.
func post(ctx context.Context, url, key string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/transfers", strings.NewReader(`{"amount":1}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	_, err = io.ReadAll(res.Body)
	return res, err
}
