package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"

	"example.com/orders/api"
)

// validator is request validation as kin-openapi's openapi3filter does it
// for the module's createOrder, keeping the value it validated on the
// body (KeepValidatedValue) for the strict server to bind.
func validator(t *testing.T) func(*http.Request) error {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	item := doc.Paths.Find("/orders")
	route := &routers.Route{Spec: doc, Path: "/orders", PathItem: item, Method: http.MethodPost, Operation: item.Post}
	return func(r *http.Request) error {
		return openapi3filter.ValidateRequest(r.Context(), &openapi3filter.RequestValidationInput{
			Request: r, Route: route, Options: &openapi3filter.Options{KeepValidatedValue: true}})
	}
}

// notes is the strict server of a test: it takes its transaction, as
// createOrder's method must, and records the note of each order it is
// given.
type notes struct{ got *[]string }

func (n notes) CreateOrder(ctx context.Context, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	if _, err := api.CreateOrderTx(ctx); err != nil {
		return nil, err
	}
	note := "(none)"
	if req.Body.Note != nil {
		note = *req.Body.Note
	}
	*n.got = append(*n.got, note)
	return api.CreateOrder201JSONResponse{Id: 1, Item: req.Body.Item, Quantity: req.Body.Quantity}, nil
}

// TestValidatedValueIsBound: with a request validator in front of the
// strict server, the method gets the value the validator checked, as it
// would without idemgen's pieces. A member "NOTE", which the validator
// passes over as a property of no name it knows and the engine accepts
// (outside the fingerprint), does not reach the method as note, past its
// maxLength: the strict server binds the validated value, matching names
// exactly, only while the Echo's binder is echo's own, and only if the
// engine's copy of the body still offers it. The validator runs behind
// idemecho.Middleware (Use'd after it), or in front of the whole service.
func TestValidatedValueIsBound(t *testing.T) {
	t.Run("behind the engine", func(t *testing.T) {
		var got []string
		h := mountNotes(t, &got)
		validate := validator(t)
		h.(*echo.Echo).Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				if err := validate(c.Request()); err != nil {
					return echo.NewHTTPError(http.StatusBadRequest, err.Error())
				}
				return next(c)
			}
		})
		assertValidatedValueBound(t, h, &got)
	})
	t.Run("in front of the engine", func(t *testing.T) {
		var got []string
		h := mountNotes(t, &got)
		validate := validator(t)
		assertValidatedValueBound(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := validate(r); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			h.ServeHTTP(w, r)
		}), &got)
	})
}

// mountNotes is the page's service with notes as its strict server,
// which records in got the note of each order it places.
func mountNotes(t *testing.T, got *[]string) http.Handler {
	t.Helper()
	h, err := newHandler(stacktest.OpenStore(t, schema), notes{got})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// assertValidatedValueBound sends h orders with notes: one the validator
// refuses, one it passes, and one whose note is "NOTE", which it never
// checks and which must not reach the method.
func assertValidatedValueBound(t *testing.T, h http.Handler, got *[]string) {
	t.Helper()
	long := strings.Repeat("ring twice, ", 5)
	if status, _, body := order(h, "order-1", "", `{"item": "lamp", "quantity": 2, "note": "`+long+`"}`); status != http.StatusBadRequest {
		t.Fatalf("a note past maxLength: %d %s, want the validator's 400", status, body)
	}
	if status, _, body := order(h, "order-2", "", `{"item": "lamp", "quantity": 2, "note": "ring twice"}`); status != http.StatusCreated {
		t.Fatalf("a valid note: %d %s, want 201", status, body)
	}
	if status, _, body := order(h, "order-3", "", `{"item": "lamp", "quantity": 2, "NOTE": "`+long+`"}`); status != http.StatusCreated {
		t.Fatalf("a member NOTE: %d %s, want 201", status, body)
	}
	if want := []string{"ring twice", "(none)"}; strings.Join(*got, "|") != strings.Join(want, "|") {
		t.Fatalf("the method got notes %q, want %q: a NOTE the validator never checked reached it as note", *got, want)
	}
}
