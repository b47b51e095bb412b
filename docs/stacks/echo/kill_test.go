package main

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"

	"example.com/orders/api"
)

// TestMain serves the page's service in the child processes the kill
// tests start and end with SIGKILL (stacktest.Main); a stuck child's
// CreateOrder stops after its write, before its transaction commits.
func TestMain(m *testing.M) {
	stacktest.Main(m, func(db string, stuck bool) error {
		var h api.StrictServerInterface = orders{}
		if stuck {
			h = stuckOrders{db: db}
		}
		return run(context.Background(), db, "127.0.0.1:0", h)
	})
}

// stuckOrders is orders whose CreateOrder, once it has written the order,
// hangs (stacktest.Hang) with its transaction open.
type stuckOrders struct {
	orders
	db string
}

func (s stuckOrders) CreateOrder(ctx context.Context, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	if _, err := s.orders.CreateOrder(ctx, req); err != nil {
		return nil, err
	}
	return nil, stacktest.Hang(s.db)
}

// TestKills: killed with SIGKILL after it answered, the service started
// again replays the retry; killed after CreateOrder wrote but before its
// transaction committed, it leaves nothing and runs the retry at once.
// One order either way (stacktest.Kills).
func TestKills(t *testing.T) {
	stacktest.Kills(t)
}
