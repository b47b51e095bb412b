package pgoutbox_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A service whose pool is as large as the transactional requests it
// serves at once, which all stage an effect, must not stall: each such
// request holds a connection of the pool for its handler, so the first
// Stage of an Outbox must learn the table's schema without asking the
// pool for another. Were it to, requests that fill the pool before one
// Stage has learnt it (a service that starts, or restarts, under load)
// would each wait for a connection that only another waiting handler can
// give back, until their clients gave up. pgstore keeps phases off the
// pool for the same reason (its phase pool).
func TestFirstStagesOfAFullPoolWaitForEachOther(t *testing.T) {
	schema := newSchema(t)
	const conns = 3
	cfg, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ob := pgoutbox.New(pool, idemoutbox.Options{})
	var arrived sync.WaitGroup
	arrived.Add(conns)
	all := make(chan struct{})
	var inTx atomic.Int32
	go func() { arrived.Wait(); close(all) }()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := idem.TxFor[pgx.Tx](ctx, "createOrder")
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if _, err := tx.Exec(ctx, "INSERT INTO orders (marker) VALUES ($1)", key); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		// The requests are in flight together, as under load.
		inTx.Add(1)
		arrived.Done()
		select {
		case <-all:
		case <-time.After(2 * time.Second):
		}
		if err := ob.Stage(ctx, "receipt", []byte(key)); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	engine, err := idem.New(idem.Config{
		Store: pgstore.New(pool),
		Policies: []idem.Policy{idemtest.Policy("createOrder", "/orders", func(p *idem.Policy) {
			p.Lease, p.OnLeaseExpiry, p.Transactional = 30*time.Second, idemstore.Takeover, true
		})},
		Tenant: func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(engine.Middleware(h))
	t.Cleanup(srv.Close)
	const patience = 5 * time.Second
	client := &http.Client{Timeout: patience}
	statuses := make([]string, conns)
	var done sync.WaitGroup
	start := time.Now()
	for i := range conns {
		done.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("k%d", i))
			res, err := client.Do(req)
			if err != nil {
				statuses[i] = "no answer: " + err.Error()
				return
			}
			res.Body.Close()
			statuses[i] = res.Status
		})
	}
	done.Wait()
	took := time.Since(start)
	t.Logf("after %v, with %d handlers in their transactions at once: %q", took.Round(time.Millisecond), inTx.Load(), statuses)
	for _, s := range statuses {
		if s != "201 Created" {
			t.Fatalf("%d transactional requests on a pool of %d connections, each staging an effect: none staged within %v; they waited for each other's connections (%q)",
				conns, conns, patience, statuses)
		}
	}
}
