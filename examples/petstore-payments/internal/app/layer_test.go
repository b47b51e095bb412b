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
	"github.com/idemgen/idemgen/examples/petstore-payments/migrations"
	"github.com/idemgen/idemgen/runtime/idem"
)

// TestRouteCheck: the start-up check passes the server as the example
// mounts it, and refuses one whose transactional operations reach each
// other's handlers, naming both.
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
	if err := db.Migrate(ctx, migrations.FS()); err != nil {
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

	// Each transactional operation mounted on the other's adapter: its
	// writes would commit with another operation's key.
	other := map[string]string{server.OpCreateTransfer: server.OpCreateAdoption, server.OpCreateAdoption: server.OpCreateTransfer}
	swapped := func(op string, h server.TxHandlerFunc) http.Handler { return l.mount(other[op], h) }
	err = l.check(serverWith(swapped).Route)
	if err == nil {
		t.Fatal("transactional operations mounted on each other's adapters pass the check")
	}
	for op, applied := range other {
		if !strings.Contains(err.Error(), "("+op+")") || !strings.Contains(err.Error(), "applies the policy of operation "+applied) {
			t.Errorf("the check's error does not say that %s reaches %s's handler: %v", op, applied, err)
		}
	}
}
