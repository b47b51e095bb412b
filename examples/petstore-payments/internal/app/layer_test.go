package app

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/runtime/idem"
)

// TestRouteCheck: the start-up check passes the server as the example
// mounts it, and refuses one whose transactional operations reach plain
// handlers that write outside the key's transaction, naming both.
func TestRouteCheck(t *testing.T) { checkRoutesOn(t, "") }

// TestRouteCheckSplitOverRedis: the same with the policies split between
// a Redis engine and an SQL one, each checking its own.
func TestRouteCheckSplitOverRedis(t *testing.T) {
	storeURL := os.Getenv("IDEMGEN_TEST_REDIS_URL")
	if storeURL == "" {
		t.Skip("IDEMGEN_TEST_REDIS_URL is unset; set it to a Redis URL to check the routes of the split layer")
	}
	checkRoutesOn(t, storeURL)
}

func checkRoutesOn(t *testing.T, storeURL string) {
	ctx := context.Background()
	db, err := database.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "routes.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(ctx, os.DirFS("../../migrations")); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	l, err := newLayer(ctx, db, storeURL, "routecheck:", idem.Config{Tenant: server.TenantFromRequest, Logger: log}, log)
	if err != nil {
		t.Fatal(err)
	}
	if l.close != nil {
		t.Cleanup(func() { _ = l.close() })
	}
	serverWith := func(mount server.TxMount) *server.Server {
		srv, err := server.New(server.Config{
			Ledger: ledger.New(db.Dialect), Conn: db.Conn(), Keys: map[string]string{"k": "t"},
			Idempotency: l.middleware, Tx: mount,
		})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}

	if err := l.check(serverWith(l.mount).Route); err != nil {
		t.Errorf("the example's own mounting fails the check: %v", err)
	}

	plain := func(op string, h server.TxHandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, db.Conn()) })
	}
	err = l.check(serverWith(plain).Route)
	if err == nil {
		t.Fatal("transactional operations mounted as plain handlers pass the check")
	}
	for _, op := range []string{server.OpCreateTransfer, server.OpCreateAdoption} {
		if !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), "does not take its transaction") {
			t.Errorf("the check's error does not say that %s does not take its transaction: %v", op, err)
		}
	}
}
