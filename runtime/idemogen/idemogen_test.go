package idemogen_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ogen-go/ogen/ogenerrors"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemogen"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func newEngine(t *testing.T) *idem.Engine {
	t.Helper()
	e, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{idemtest.Policy("createOrder", "/orders")},
		Tenant:   idem.SingleTenant("default"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// server stands in for an ogen server: a body of "bad" (a JSON string) fails with the
// error ogen's decoding would give, handed to onError as ogen hands it to
// its ErrorHandler; "conflict" is an error the handler method returned;
// anything else runs the method (counted) and answers 201.
func server(onError ogenerrors.ErrorHandler, runs *atomic.Int64, decodeErr error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch string(body) {
		case `"bad"`:
			onError(r.Context(), w, r, decodeErr)
			return
		case `"conflict"`:
			runs.Add(1)
			onError(r.Context(), w, r, errors.New("the order was already shipped"))
			return
		}
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
}

func post(h http.Handler, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A request ogen could not decode is answered by the wrapped error
// handler, and its 400 is not the key's answer: the corrected retry under
// the same key runs.
func TestErrorHandlerReleasesARequestOgenRefused(t *testing.T) {
	op := ogenerrors.OperationContext{Name: "CreateOrder", ID: "createOrder"}
	for name, decodeErr := range map[string]error{
		"body":   &ogenerrors.DecodeRequestError{OperationContext: op, Err: errors.New("invalid: quantity (expected int)")},
		"params": &ogenerrors.DecodeParamsError{OperationContext: op, Err: errors.New("invalid: orderId")},
	} {
		t.Run(name, func(t *testing.T) {
			var runs atomic.Int64
			h := newEngine(t).Middleware(server(idemogen.ErrorHandler(nil), &runs, fmt.Errorf("ogen: %w", decodeErr)))
			first := post(h, `"bad"`)
			if first.Code != ogenerrors.ErrorCode(decodeErr) || !strings.Contains(first.Body.String(), "error_message") {
				t.Fatalf("refused request: %d %s, want ogen's default answer %d", first.Code, first.Body, ogenerrors.ErrorCode(decodeErr))
			}
			if w := post(h, `"ok"`); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" || runs.Load() != 1 {
				t.Fatalf("corrected retry: %d replayed=%q after %d runs, want it to run once with 201", w.Code, w.Header().Get("Idempotent-Replayed"), runs.Load())
			}
		})
	}
}

// An error the handler method returned is its answer: the given error
// handler writes it, and the engine stores it as the key's.
func TestErrorHandlerKeepsAnswersOfTheHandler(t *testing.T) {
	var runs atomic.Int64
	conflict := func(_ context.Context, w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusConflict)
	}
	h := newEngine(t).Middleware(server(idemogen.ErrorHandler(conflict), &runs, nil))
	for i := range 2 {
		w := post(h, `"conflict"`)
		if w.Code != http.StatusConflict || (i == 1) != (w.Header().Get("Idempotent-Replayed") == "true") {
			t.Fatalf("request %d: %d replayed=%q, want 409, replayed on the retry", i+1, w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1", runs.Load())
	}
}

// route is a stand-in for the Route type ogen generates.
type route string

func (r route) PathPattern() string { return string(r) }

// Lookup answers with the server and the OpenAPI path of what find
// matched, so CheckRoutes passes a server that routes every protected
// operation and names one that routes none.
func TestLookup(t *testing.T) {
	e := newEngine(t)
	srv := http.NotFoundHandler()
	routes := func(method string, u *url.URL) (route, bool) {
		return "/orders", method == http.MethodPost && u.Path == "/orders"
	}
	if err := e.CheckRoutes(idem.BehindMiddleware, idemogen.Lookup(srv, routes)); err != nil {
		t.Fatalf("a server that routes POST /orders: %v", err)
	}
	none := func(string, *url.URL) (route, bool) { return "", false }
	if err := e.CheckRoutes(idem.BehindMiddleware, idemogen.Lookup(srv, none)); err == nil || !strings.Contains(err.Error(), "createOrder") {
		t.Fatalf("a server that routes nothing: %v, want an error naming createOrder", err)
	}
}
