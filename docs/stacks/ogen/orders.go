package main

import (
	"context"
	"fmt"

	"example.com/orders/api"
)

// orders implements the ogen server's Handler.
type orders struct{}

// docs:begin create-order
// CreateOrder is transactional: it writes through the transaction that
// also records its idempotency key, which it gets from its context (ogen
// passes the request's) through the generated accessor.
func (orders) CreateOrder(ctx context.Context, req *api.NewOrder) (*api.Order, error) {
	tx, err := api.CreateOrderTx(ctx)
	if err != nil {
		return nil, err
	}
	order := &api.Order{Item: req.Item, Quantity: req.Quantity}
	err = tx.QueryRowContext(ctx, `INSERT INTO orders (item, quantity) VALUES (?, ?) RETURNING id`,
		req.Item, req.Quantity).Scan(&order.ID)
	if err != nil {
		return nil, fmt.Errorf("insert order: %w", err)
	}
	return order, nil
}

// docs:end create-order
