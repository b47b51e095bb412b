package sqliteoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// A handler stages a receipt e-mail in its request's transaction, and a
// runner in the same service sends it once the request has committed.
func Example() {
	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	if err := sqliteoutbox.Migrate(ctx, store.DB()); err != nil {
		panic(err)
	}
	_, _ = store.DB().Exec(`CREATE TABLE orders (id TEXT)`)

	// docs:begin stage
	outbox := sqliteoutbox.New(store, idemoutbox.Options{})
	handler := idem.TxHandler("createOrder", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO orders (id) VALUES ('o-1')`); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// Staged in tx: sent if and only if the order commits.
		err := outbox.Stage(r.Context(), "receipt", []byte(`{"to":"ann@example.com","order":"o-1"}`))
		if errors.Is(err, idemoutbox.ErrTooLarge) {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	// docs:end stage

	engine, err := idem.New(idem.Config{
		Store: store,
		Policies: []idem.Policy{idemtest.Policy("createOrder", "/orders", func(p *idem.Policy) {
			p.Transactional, p.OnLeaseExpiry = true, idemstore.Takeover
		})},
		Tenant: func(*http.Request) (string, bool) { return "shop", true },
	})
	if err != nil {
		panic(err)
	}
	for range 2 { // a retry replays; it stages nothing more
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "order-o-1")
		rec := httptest.NewRecorder()
		engine.Middleware(handler).ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}

	sent := make(chan string, 1)
	// docs:begin runner
	runner, err := idemoutbox.NewRunner(idemoutbox.Config{
		Store: outbox,
		Deliver: func(ctx context.Context, m idemoutbox.Message) error {
			// Hand m.Payload to the mail service, with m.EffectKey as
			// its idempotency key if it takes one.
			sent <- m.Name + " " + string(m.Payload)
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(runCtx) }() // returns once drained
	// docs:end runner
	select {
	case s := <-sent:
		fmt.Println(s)
	case <-time.After(30 * time.Second):
		fmt.Println("nothing sent")
	}
	stop()
	<-done
	// Output:
	// 201
	// 201
	// receipt {"to":"ann@example.com","order":"o-1"}
}
