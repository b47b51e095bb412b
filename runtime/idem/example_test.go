package idem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// examplePolicy is what idemgen generates for POST /orders: a required
// header key, remembered for a day.
func examplePolicy() idem.Policy {
	return idem.Policy{
		OperationID:      "createOrder",
		Method:           http.MethodPost,
		Path:             "/orders",
		Scope:            idem.ScopeOperation,
		Key:              idem.KeySource{In: key.InHeader, Name: "Idempotency-Key"},
		KeyMaxLength:     255,
		Required:         true,
		TTL:              24 * time.Hour,
		Lease:            time.Minute,
		MaxSnapshotBytes: 1 << 20,
		OnLeaseExpiry:    idemstore.FailClosed,
	}
}

// exampleEngine is an engine over an in-memory store whose tenant is
// fixed; a real one reads it from the authenticated request.
func exampleEngine() *idem.Engine {
	e, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{examplePolicy()},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		panic(err)
	}
	return e
}

// send posts body under key and prints the answer.
func send(h http.Handler, key string) {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"lamp"}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Body.String(), "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
}

func ExampleNew() {
	engine, err := idem.New(idem.Config{
		Store:    memstore.New(), // pgstore, sqlitestore or redisstore in production
		Policies: []idem.Policy{examplePolicy()},
		Tenant: func(r *http.Request) (string, bool) {
			// The authenticated tenant; authentication runs before the engine.
			t := r.Header.Get("X-Tenant")
			return t, t != ""
		},
	})
	fmt.Println(engine != nil, err)
	// Output: true <nil>
}

func ExampleEngine_Middleware() {
	engine := exampleEngine()
	orders := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, orders)
	})
	h := engine.Middleware(mux)
	send(h, "k1")
	send(h, "k1") // a retry: answered from the record
	fmt.Println("orders:", orders)
	// Output:
	// 201 {"id":1} replayed: false
	// 201 {"id":1} replayed: true
	// orders: 1
}

func ExampleEngine_Handler() {
	engine := exampleEngine()
	mux := http.NewServeMux()
	mux.Handle("POST /orders", engine.Handler("createOrder", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	send(mux, "k1")
	send(mux, "k1")
	// Output:
	// 201  replayed: false
	// 201  replayed: true
}

func ExampleEngine_CheckRoutes() {
	engine := exampleEngine()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(http.ResponseWriter, *http.Request) {})
	// Behind the middleware, the route exists and the engine recognises it.
	fmt.Println(engine.CheckRoutes(idem.BehindMiddleware, mux.Handler))
	// Mounted per route, the plain handler applies no policy.
	fmt.Println(engine.CheckRoutes(idem.PerRoute, mux.Handler) != nil)
	// Output:
	// <nil>
	// true
}

func ExampleTxHandler() {
	// With transactional: true, idemgen generates an adapter that calls
	// TxHandler with the store's transaction type (pgx.Tx for pgstore);
	// the handler writes through tx, which commits with the key.
	h := idem.TxHandler("createOrder", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO orders (item) VALUES ('lamp')`); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	// Outside the engine there is no transaction: the handler never runs.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders", nil))
	fmt.Println(w.Code)
	// Output: 500
}

func ExampleNotExecuted() {
	engine := exampleEngine()
	h := engine.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Broken") != "" {
			// The body did not decode: nothing ran, so nothing is stored.
			idem.NotExecuted(r.Context())
			http.Error(w, "can't decode body", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	bad := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
	bad.Header.Set("Content-Type", "application/json")
	bad.Header.Set("Idempotency-Key", "k1")
	bad.Header.Set("X-Broken", "1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, bad)
	fmt.Println(w.Code)
	send(h, "k1") // the corrected request, same key: it runs
	// Output:
	// 400
	// 201  replayed: false
}

func ExampleEngine_ServeMux() {
	engine := exampleEngine()
	// Every route registered through it gets its operation's policy, as
	// oapi-codegen's std-http server registers them (its BaseRouter).
	mux := engine.ServeMux(http.NewServeMux())
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	fmt.Println(engine.CheckRoutes(idem.PerRoute, mux.Handler))
	send(mux, "k1")
	send(mux, "k1")
	// Output:
	// <nil>
	// 201  replayed: false
	// 201  replayed: true
}
