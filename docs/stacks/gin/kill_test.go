package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/orders/api"
)

// The kill tests run the service as a child process of the test binary
// (stacktest.Start), which they end with SIGKILL. In the child, TestMain
// serves the database childDB names, through run as main does; with
// childStuck set, CreateOrder stops after its write, before its
// transaction commits.
const (
	childDB    = "ORDERS_TEST_CHILD_DB"
	childStuck = "ORDERS_TEST_CHILD_STUCK"
)

func TestMain(m *testing.M) {
	path := os.Getenv(childDB)
	if path == "" {
		os.Exit(m.Run())
	}
	var h api.StrictServerInterface = orders{}
	if os.Getenv(childStuck) != "" {
		h = stuck{written: path + ".written"}
	}
	if err := run(context.Background(), path, "127.0.0.1:0", h); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// stuck is orders whose CreateOrder, once it has written the order,
// creates the file written and never returns, so the transaction that
// holds the order and its key stays open until the process dies.
type stuck struct {
	orders
	written string
}

func (s stuck) CreateOrder(ctx context.Context, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	if _, err := s.orders.CreateOrder(ctx, req); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.written, nil, 0o600); err != nil {
		return nil, err
	}
	select {}
}

// TestOrderIsReplayedAfterKill: killed with SIGKILL after it placed an
// order and answered, the service started again answers the retry from
// its record: one order, and a replay.
func TestOrderIsReplayedAfterKill(t *testing.T) {
	stacktest.ReplayedAfterKill(t, service(t))
}

// TestKillMidHandlerLeavesOneOrder: killed with SIGKILL after CreateOrder
// wrote the order but before its transaction committed, the service
// leaves neither the order nor an answer for its key; started again, it
// runs the retry at once (the crash's lease ended on start), and there is
// one order.
func TestKillMidHandlerLeavesOneOrder(t *testing.T) {
	stacktest.OneRowAfterKillMidHandler(t, service(t))
}

// service is the page's service on a database of the test's own, sent
// the page's curl command.
func service(t *testing.T) stacktest.Service {
	path := filepath.Join(t.TempDir(), "orders.db")
	return stacktest.Service{
		Env:     []string{childDB + "=" + path},
		Stuck:   []string{childDB + "=" + path, childStuck + "=1"},
		Written: path + ".written",
		Request: func(base string) *http.Request { return stacktest.NewRequest(base, "order-1", stacktest.Order) },
		Rows: func(t testing.TB) int {
			store, err := sqlitestore.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			return stacktest.Orders(t, store)
		},
	}
}
