package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"example.com/orders/api"
)

// docs:begin create-order
// orders implements the strict server.
type orders struct{}

// CreateOrder is transactional: it writes through the transaction that
// also records its idempotency key, which it gets from its context (the
// request's, which echo's strict server passes) through the generated
// accessor. A quantity below 1 is its own 400, the key's answer like any
// other.
func (orders) CreateOrder(ctx context.Context, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	if req.Body.Quantity < 1 {
		return nil, echo.NewHTTPError(http.StatusBadRequest, "quantity must be at least 1")
	}
	tx, err := api.CreateOrderTx(ctx)
	if err != nil {
		return nil, err
	}
	tenant, _ := ctx.Value(tenantKey{}).(string)
	express := req.Params.Express != nil && *req.Params.Express
	order := api.CreateOrder201JSONResponse{Item: req.Body.Item, Quantity: req.Body.Quantity}
	err = tx.QueryRowContext(ctx, `INSERT INTO orders (tenant, item, quantity, express) VALUES (?, ?, ?, ?) RETURNING id`,
		tenant, req.Body.Item, req.Body.Quantity, express).Scan(&order.Id)
	if err != nil {
		return nil, fmt.Errorf("insert order: %w", err)
	}
	return order, nil
}

// docs:end create-order
