package main

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/problem"

	"example.com/orders/api"
)

// failingOrders writes the order, then fails as fail says on its first
// run, and places the order as usual on later runs.
type failingOrders struct {
	orders
	runs *atomic.Int64
	fail func() (*api.Order, error)
}

func (f failingOrders) CreateOrder(ctx context.Context, req *api.NewOrder) (*api.Order, error) {
	n := f.runs.Add(1)
	o, err := f.orders.CreateOrder(ctx, req)
	if err != nil || n > 1 {
		return o, err
	}
	return f.fail()
}

// TestEdgeOgenFailuresAreNotTheKeysAnswer: a handler method of a real ogen
// server that returns an error (ogen's 500), panics, or returns a nil
// response (ogen's encoder panics after it wrote 201) leaves no answer on
// the key and no order: the retry under the same key runs and places one
// order, and its answer is what a replay returns.
func TestEdgeOgenFailuresAreNotTheKeysAnswer(t *testing.T) {
	for name, fail := range map[string]func() (*api.Order, error){
		"error":        func() (*api.Order, error) { return nil, errors.New("downstream down") },
		"panic":        func() (*api.Order, error) { panic("boom") },
		"nil response": func() (*api.Order, error) { return nil, nil },
	} {
		t.Run(name, func(t *testing.T) {
			store := stacktest.OpenStore(t, schema)
			var runs atomic.Int64
			h, err := newHandler(store, failingOrders{runs: &runs, fail: fail})
			if err != nil {
				t.Fatal(err)
			}
			first, fb := stacktest.Post(h, "k", stacktest.Order)
			if first.StatusCode < 500 {
				t.Fatalf("first answer %d %s, want a server error", first.StatusCode, fb)
			}
			if n := stacktest.Orders(t, store); n != 0 {
				t.Fatalf("%d orders after a failed run, want 0", n)
			}
			second, sb := stacktest.Post(h, "k", stacktest.Order)
			third, tb := stacktest.Post(h, "k", stacktest.Order)
			if second.StatusCode != http.StatusCreated || second.Header.Get(problem.ReplayedHeader) != "" {
				t.Fatalf("retry %d %s, want the order placed", second.StatusCode, sb)
			}
			if third.StatusCode != http.StatusCreated || third.Header.Get(problem.ReplayedHeader) != "true" || tb != sb {
				t.Fatalf("second retry %d %s, want the replay of %s", third.StatusCode, tb, sb)
			}
			if n := stacktest.Orders(t, store); n != 1 || runs.Load() != 2 {
				t.Fatalf("%d orders in %d runs, want 1 in 2", n, runs.Load())
			}
		})
	}
}
