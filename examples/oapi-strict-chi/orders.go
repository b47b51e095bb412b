package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/oapi-strict-chi/api"
)

// orders implements the strict server.
type orders struct{ pool *pgxpool.Pool }

// maxQuantity is the stock: a larger order is refused with 422, an answer
// of the operation that is stored under its key like any other.
const maxQuantity = 100

// docs:begin create-order
// CreateOrder is transactional: it writes through the transaction that
// also records its idempotency key, which it gets from the request's
// context through the generated accessor.
func (o *orders) CreateOrder(ctx context.Context, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	if req.Body.Quantity > maxQuantity {
		return api.CreateOrder422JSONResponse{Message: fmt.Sprintf("only %d in stock", maxQuantity)}, nil
	}
	tx, err := api.CreateOrderTx(ctx)
	if err != nil {
		return nil, err
	}
	tenant, _ := ctx.Value(tenantKey{}).(string)
	order := api.CreateOrder201JSONResponse{Item: req.Body.Item, Quantity: req.Body.Quantity}
	err = tx.QueryRow(ctx, `INSERT INTO orders (tenant, item, quantity) VALUES ($1, $2, $3) RETURNING id`,
		tenant, req.Body.Item, req.Body.Quantity).Scan(&order.Id)
	if err != nil {
		return nil, fmt.Errorf("insert order: %w", err)
	}
	return order, nil
}

// docs:end create-order

// AddNote is not transactional: its key is optional, its write is its own.
func (o *orders) AddNote(ctx context.Context, req api.AddNoteRequestObject) (api.AddNoteResponseObject, error) {
	tenant, _ := ctx.Value(tenantKey{}).(string)
	_, err := o.pool.Exec(ctx, `UPDATE orders SET notes = array_append(notes, $3::text) WHERE id = $1 AND tenant = $2`,
		req.OrderId, tenant, req.Body.Text)
	if err != nil {
		return nil, fmt.Errorf("add note: %w", err)
	}
	return api.AddNote201JSONResponse{OrderId: req.OrderId, Text: req.Body.Text}, nil
}
