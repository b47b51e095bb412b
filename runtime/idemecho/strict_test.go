package idemecho_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// cancelOp is a transactional operation without a body, with a path and
// a query parameter, both in its fingerprint.
const cancelOp = "cancelTransfer"

// strictHandlerFunc and strictMiddlewareFunc are the types oapi-codegen
// generates in the package of an echo strict server.
type (
	strictHandlerFunc    func(ctx echo.Context, request any) (any, error)
	strictMiddlewareFunc func(f strictHandlerFunc, operationID string) strictHandlerFunc
)

// cancelTransfer is what oapi-codegen v2.8.2 generates for POST
// /transfers/{id}/cancel?notify=…, its ServerInterfaceWrapper and strict
// handler in one: it binds the parameters, answering one it cannot bind
// with echo's HTTPError 400, then runs the strict middleware around the
// method. The method writes through its transaction; for transfer 0 it
// then returns its own 400.
func cancelTransfer(runs *atomic.Int64, middlewares ...strictMiddlewareFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := strconv.Atoi(c.Param("id"))
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("Invalid format for parameter id: %s", err))
		}
		var notify bool
		if v := c.QueryParam("notify"); v != "" {
			if notify, err = strconv.ParseBool(v); err != nil {
				return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("Invalid format for parameter notify: %s", err))
			}
		}
		handler := strictHandlerFunc(func(c echo.Context, _ any) (any, error) {
			runs.Add(1)
			ctx := c.Request().Context()
			tx, err := idem.TxFor[*sqlitestore.Tx](ctx, cancelOp)
			if err != nil {
				return nil, err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO transfers (amount) VALUES (?)`, -id); err != nil {
				return nil, err
			}
			if id == 0 {
				return nil, echo.NewHTTPError(http.StatusBadRequest, "transfer 0 cannot be cancelled")
			}
			return map[string]any{"cancelled": id, "notify": notify}, nil
		})
		for _, m := range middlewares {
			handler = m(handler, "CancelTransfer")
		}
		response, err := handler(c, nil)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, response)
	}
}

// strictEcho serves cancelTransfer behind the engine, with
// idemecho.StrictMiddleware as its strict middleware, as
// UnboundNotExecuted asks.
func strictEcho(t *testing.T) (*echo.Echo, *atomic.Int64) {
	e, _ := adaptertest.Engine(t, func(c *idem.Config) {
		c.Policies = append(c.Policies, idemtest.Policy(cancelOp, "/transfers/{id}/cancel", func(p *idem.Policy) {
			p.Transactional = true
			p.Fingerprint = fingerprint.Spec{Path: []string{"id"}, Query: []string{"notify"}}
		}))
	})
	runs := new(atomic.Int64)
	ec := echo.New()
	ec.Use(authenticate, idemecho.Middleware(e, idemecho.UnboundNotExecuted()))
	ec.POST("/transfers", transfer(new(atomic.Int64)))
	ec.POST("/transfers/:id/cancel", cancelTransfer(runs, idemecho.StrictMiddleware[strictHandlerFunc]))
	if err := idemecho.CheckRoutes(e, ec); err != nil {
		t.Fatal(err)
	}
	return ec, runs
}

// cancel sends POST target under key.
func cancel(ec *echo.Echo, key, target string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, target, nil)
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	ec.ServeHTTP(w, r)
	return w
}

// A path or query parameter that oapi-codegen's wrapper cannot bind is its
// 400, answered before the method and not stored: the corrected request
// under the same key runs (where the stored 400 met it as another
// request, 422, or was replayed).
func TestUnboundParameterIsNotStored(t *testing.T) {
	for name, bad := range map[string]string{
		"path":  "/transfers/seven/cancel",
		"query": "/transfers/7/cancel?notify=maybe",
	} {
		t.Run(name, func(t *testing.T) {
			ec, runs := strictEcho(t)
			for range 2 {
				if w := cancel(ec, "k1", bad); w.Code != http.StatusBadRequest || w.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("%s: %d replayed=%q %s, want the wrapper's 400, unstored", bad, w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
				}
			}
			if w := cancel(ec, "k1", "/transfers/7/cancel?notify=true"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("corrected request: %d replayed=%q %s, want a fresh 201", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
			}
			if runs.Load() != 1 {
				t.Fatalf("the method ran %d times, want 1", runs.Load())
			}
		})
	}
}

// An error the method returns once StrictMiddleware let it run is its
// answer, stored: the retry is the same 400 replayed, and the method does
// not run again. Without StrictMiddleware, Middleware cannot tell it from
// the wrapper's 400, and the retry runs the method again.
func TestStrictMethodErrorIsStored(t *testing.T) {
	ec, runs := strictEcho(t)
	first := cancel(ec, "k1", "/transfers/0/cancel")
	retry := cancel(ec, "k1", "/transfers/0/cancel")
	if first.Code != http.StatusBadRequest || retry.Code != first.Code || retry.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s, retry %d replayed=%q; want 400 and a replayed 400", first.Code, first.Body, retry.Code, retry.Header().Get("Idempotent-Replayed"))
	}
	if first.Body.String() != retry.Body.String() || runs.Load() != 1 {
		t.Fatalf("replay %q, first %q, %d runs; want the same answer from one run", retry.Body, first.Body, runs.Load())
	}
}

// Without UnboundNotExecuted, an error a handler of its own returns is the
// key's answer whether or not it marked itself reached: a handler that did
// something outside its transaction and then answered 402 must not have
// its key released for a retry to do it again.
func TestUnmarkedHandlerErrorIsStoredByDefault(t *testing.T) {
	e, _ := adaptertest.Engine(t, func(c *idem.Config) {
		c.Policies = append(c.Policies, idemtest.Policy("chargeCard", "/charges", func(*idem.Policy) {}))
	})
	var charges atomic.Int64
	ec := echo.New()
	ec.Use(authenticate, idemecho.Middleware(e))
	ec.POST("/transfers", transfer(new(atomic.Int64)))
	ec.POST("/charges", func(c echo.Context) error {
		charges.Add(1) // a processor's charge, outside any transaction
		return echo.NewHTTPError(http.StatusPaymentRequired, "card declined")
	})
	first := cancel(ec, "k1", "/charges")
	retry := cancel(ec, "k1", "/charges")
	if first.Code != http.StatusPaymentRequired || retry.Header().Get("Idempotent-Replayed") != "true" || charges.Load() != 1 {
		t.Fatalf("first %d, retry %d replayed=%q, %d charges; want the 402 replayed from one charge",
			first.Code, retry.Code, retry.Header().Get("Idempotent-Replayed"), charges.Load())
	}
}
