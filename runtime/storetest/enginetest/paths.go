package enginetest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// RequestPath is one path a request takes through the engine, for a
// store's test of what each request sends to its database.
type RequestPath struct {
	// Name says what the request is: "new key", "replay", "conflict:
	// another request with the key (422)", "conflict: the key in flight
	// (409)", and "transactional new key", "transactional replay",
	// "transactional conflict: the key in flight (409)".
	Name string
	// Send makes the request, and checks its answer. It passes the
	// request to counted, which makes it and counts what it sends; work
	// that belongs to other requests (a held request's claim before,
	// its completion after) happens outside counted.
	Send func(counted func(request func()))
}

// RequestPaths serves an engine over store with a plain operation
// (createTransfer on /transfers) and a transactional one (createPayment on
// /payments, whose handler calls write with the request's transaction),
// sends a new key and a replay through each so that what a store does once
// (preparing statements, opening connections) is done, and returns the
// paths a request can take.
func RequestPaths[Tx any](t *testing.T, store idemstore.Transactor, write func(ctx context.Context, tx Tx, marker string) error) []RequestPath {
	t.Helper()
	h := &heldRequests{t: t, entered: make(chan struct{}), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /transfers", func(w http.ResponseWriter, r *http.Request) {
		h.hold(r)
		Created(w, r.Header.Get("Idempotency-Key"))
	})
	mux.Handle("POST /payments", idem.TxHandler("createPayment", func(w http.ResponseWriter, r *http.Request, tx Tx) {
		key := r.Header.Get("Idempotency-Key")
		if err := write(r.Context(), tx, key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h.hold(r)
		Created(w, key)
	}))
	h.es = ServeEngine(t, store, mux,
		EnginePolicy("createTransfer", "/transfers", time.Minute, idemstore.FailClosed, false),
		EnginePolicy("createPayment", "/payments", time.Minute, idemstore.Takeover, true))

	const body, other = `{"amount":1}`, `{"amount":2}`
	post := func(path, key, body string, status int, replayed bool) func(func(func())) {
		return func(counted func(func())) {
			counted(func() {
				t.Helper()
				a := h.es.MustPost(t, path, key, body)
				if a.Status != status || a.Replayed() != replayed {
					t.Fatalf("POST %s %s: %v, want %d (replayed %v)", path, key, a, status, replayed)
				}
			})
		}
	}
	uncounted := func(request func()) { request() }
	for _, path := range []string{"/transfers", "/payments"} {
		post(path, "warm", body, http.StatusCreated, false)(uncounted)
		post(path, "warm", body, http.StatusCreated, true)(uncounted)
	}
	return []RequestPath{
		{"new key", post("/transfers", "k1", body, http.StatusCreated, false)},
		{"replay", post("/transfers", "k1", body, http.StatusCreated, true)},
		{"conflict: another request with the key (422)", post("/transfers", "k1", other, http.StatusUnprocessableEntity, false)},
		{"conflict: the key in flight (409)", h.while("/transfers", "k2", post("/transfers", "k2", body, http.StatusConflict, false))},
		{"transactional new key", post("/payments", "k3", body, http.StatusCreated, false)},
		{"transactional replay", post("/payments", "k3", body, http.StatusCreated, true)},
		{"transactional conflict: the key in flight (409)", h.while("/payments", "k4", post("/payments", "k4", body, http.StatusConflict, false))},
	}
}

// heldRequests keeps the handler of a request with an X-Hold header
// running while the test sends others.
type heldRequests struct {
	t       *testing.T
	es      *EngineServer
	entered chan struct{}
	release chan struct{}
}

func (h *heldRequests) hold(r *http.Request) {
	if r.Header.Get("X-Hold") != "" {
		h.entered <- struct{}{}
		<-h.release
	}
}

// while sends a request to path with key that its handler holds, sends
// step's request while it is held, then lets it go and checks its answer.
func (h *heldRequests) while(path, key string, step func(func(func()))) func(func(func())) {
	return func(counted func(func())) {
		answer := make(chan Answer, 1)
		go func() {
			a, err := h.es.Post(path, key, `{"amount":1}`, "X-Hold", "1")
			if err != nil {
				h.t.Error(err)
			}
			answer <- a
		}()
		<-h.entered
		// Let it go even when step fails the test, or the server's
		// shutdown would wait for it for ever.
		defer func() {
			h.release <- struct{}{}
			if a := <-answer; a.Status != http.StatusCreated {
				h.t.Errorf("held request: %v", a)
			}
		}()
		step(counted)
	}
}
