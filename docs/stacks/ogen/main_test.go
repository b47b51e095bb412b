package main

import (
	"bufio"
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemogen"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/orders/api"
)

const order = `{"item": "lamp", "quantity": 2}`

// TestRetryIsReplayed: the page's two curl commands, in process. The same
// order sent twice under one key is placed once, and the second answer is
// the first, marked replayed.
func TestRetryIsReplayed(t *testing.T) {
	store, db := openStore(t)
	handler, err := newHandler(store)
	if err != nil {
		t.Fatal(err)
	}
	first, firstBody := post(handler, "order-1", order)
	second, secondBody := post(handler, "order-1", order)
	if first.StatusCode != http.StatusCreated || second.StatusCode != http.StatusCreated {
		t.Fatalf("answers %d %s and %d %s, want two 201s", first.StatusCode, firstBody, second.StatusCode, secondBody)
	}
	if first.Header.Get("Idempotent-Replayed") != "" || second.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("Idempotent-Replayed %q then %q, want none then true",
			first.Header.Get("Idempotent-Replayed"), second.Header.Get("Idempotent-Replayed"))
	}
	if firstBody != secondBody {
		t.Errorf("the replay %q differs from the first answer %q", secondBody, firstBody)
	}
	if n := countOrders(t, db); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestMalformedBodyIsNotStored: a body ogen cannot decode is its 400, not
// the key's answer, so the corrected request under the same key runs.
func TestMalformedBodyIsNotStored(t *testing.T) {
	store, db := openStore(t)
	handler, err := newHandler(store)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if w, body := post(handler, "order-1", `{"item": "lamp", "quantity": "two"}`); w.StatusCode != http.StatusBadRequest || w.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("malformed body: %d replayed=%q %s, want ogen's 400, unstored", w.StatusCode, w.Header.Get("Idempotent-Replayed"), body)
		}
	}
	if w, body := post(handler, "order-1", order); w.StatusCode != http.StatusCreated || w.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("corrected request under the same key: %d replayed=%q %s, want it to run", w.StatusCode, w.Header.Get("Idempotent-Replayed"), body)
	}
	if n := countOrders(t, db); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestCheckRoutesAsksTheServer: the lookup matches as the ogen server
// does, so a server that does not serve the operation's path (here, below
// a prefix the engine is not told of) stops the service.
func TestCheckRoutesAsksTheServer(t *testing.T) {
	store, _ := openStore(t)
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: idem.SingleTenant("default")})
	if err != nil {
		t.Fatal(err)
	}
	server, err := api.NewServer(orders{}, api.WithPathPrefix("/v1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.CheckRoutes(idem.BehindMiddleware, idemogen.Lookup(server, server.FindPath)); err == nil || !strings.Contains(err.Error(), "createOrder") {
		t.Fatalf("CheckRoutes of a server below /v1: %v, want an error naming createOrder", err)
	}
}

// TestOrderIsReplayedAfterKill: the service, killed with SIGKILL after it
// placed an order and started again, answers the retry from its record:
// one row, and a replay.
func TestOrderIsReplayedAfterKill(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "orders")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbPath := filepath.Join(t.TempDir(), "orders.db")
	base, kill := start(t, bin, dbPath)
	if res, body := postTo(t, base, "order-1", order); res.StatusCode != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first request: %d %s", res.StatusCode, body)
	}
	kill()
	base, _ = start(t, bin, dbPath)
	res, body := postTo(t, base, "order-1", order)
	if res.StatusCode != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after SIGKILL: %d replayed=%q %s; want a replayed 201", res.StatusCode, res.Header.Get("Idempotent-Replayed"), body)
	}
	store, err := sqlitestore.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if n := countOrders(t, store.DB()); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

func openStore(t *testing.T) (*sqlitestore.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().ExecContext(ctx, schema); err != nil {
		t.Fatal(err)
	}
	return store, store.DB()
}

// post sends an order to h under key, as the page's curl command does.
func post(h http.Handler, key, body string) (*http.Response, string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, newRequest("", key, body))
	b, _ := io.ReadAll(w.Result().Body)
	return w.Result(), string(b)
}

// postTo is post over the network, to the service at base.
func postTo(t *testing.T, base, key, body string) (*http.Response, string) {
	t.Helper()
	req := newRequest(base, key, body)
	req.RequestURI = ""
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /orders: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func newRequest(base, key, body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return req
}

func countOrders(t *testing.T, db *sql.DB) (n int) {
	t.Helper()
	if err := db.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// start runs the service built at bin on the database at dbPath, waits
// for the address it prints once CheckRoutes passed, and returns it with
// a kill that ends the process with SIGKILL: no shutdown, no flush.
func start(t *testing.T, bin, dbPath string) (base string, kill func()) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DB="+dbPath, "ADDR=127.0.0.1:0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill = func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	t.Cleanup(kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("the service did not start: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return "http://" + addr, kill
}
