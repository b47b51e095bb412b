package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/oapi-strict-chi/apiclient"
	"github.com/idemgen/idemgen/runtime/idemclient"
)

// postgresURL creates a database of its own for the test and drops it at
// the end; without IDEMGEN_TEST_DATABASE_URL the test is skipped.
func postgresURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv("IDEMGEN_TEST_DATABASE_URL")
	if base == "" {
		t.Skip("IDEMGEN_TEST_DATABASE_URL is unset; set it to a PostgreSQL URL to run the end-to-end tests")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to IDEMGEN_TEST_DATABASE_URL: %v", err)
	}
	name := "oapi_strict_chi_" + strings.ToLower(rand.Text()[:10])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// service is the example built as a binary and run as a process of its
// own, so that a test can kill it with SIGKILL.
type service struct {
	t      *testing.T
	bin    string
	dbURL  string
	cmd    *exec.Cmd
	base   string
	client *http.Client
}

func newService(t *testing.T) *service {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "oapi-strict-chi")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tr, err := idemclient.New(idemclient.Config{Operations: apiclient.ClientOperations()})
	if err != nil {
		t.Fatal(err)
	}
	s := &service{t: t, bin: bin, dbURL: postgresURL(t), client: tr.Client()}
	s.start()
	t.Cleanup(s.kill)
	return s
}

// start runs the service and waits for the address it prints, which it
// prints only after CheckRoutes passed.
func (s *service) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+s.dbURL, "ADDR=127.0.0.1:0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		s.t.Fatalf("the service did not start: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	s.cmd, s.base = cmd, "http://"+addr
}

// kill ends the process with SIGKILL: no shutdown, no flush.
func (s *service) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// post sends body to path under key, through the retrying client, and
// returns the status, whether the answer was a replay, and the body.
func (s *service) post(path, key, body string) (status int, replayed bool, text string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(idemclient.WithKey(ctx, key), http.MethodPost, s.base+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer acme")
	res, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Idempotent-Replayed") == "true", string(b)
}

func (s *service) orders() int {
	s.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

// An order placed through the strict server, whose route nobody mounted
// by hand, is answered again from its record after the server is killed
// with SIGKILL and started again: one row, and a replay.
func TestOrderIsReplayedAfterKill(t *testing.T) {
	s := newService(t)
	const order = `{"item": "lamp", "quantity": 2}`
	if status, replayed, body := s.post("/orders", "order-1", order); status != http.StatusCreated || replayed {
		t.Fatalf("first request: %d replayed=%v %s", status, replayed, body)
	}
	s.kill()
	s.start()
	status, replayed, body := s.post("/orders", "order-1", order)
	if status != http.StatusCreated || !replayed {
		t.Fatalf("retry after SIGKILL: %d replayed=%v %s; want a replayed 201", status, replayed, body)
	}
	if n := s.orders(); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

// A body the strict server cannot decode is answered 400 and not stored:
// the same key then carries the corrected request, which runs. A 422 of
// the operation (out of stock) is stored and replayed.
func TestDecodeErrorIsNotStoredBusinessErrorIs(t *testing.T) {
	s := newService(t)
	for range 2 {
		status, replayed, body := s.post("/orders", "order-2", `{"item": "lamp", "quantity": "two"}`)
		if status != http.StatusBadRequest || replayed || !strings.Contains(body, "decode") {
			t.Fatalf("undecodable body: %d replayed=%v %q; want the strict server's 400, unstored", status, replayed, body)
		}
	}
	if status, replayed, body := s.post("/orders", "order-2", `{"item": "lamp", "quantity": 2}`); status != http.StatusCreated || replayed {
		t.Fatalf("corrected request under the same key: %d replayed=%v %s; want it to run", status, replayed, body)
	}
	const tooMany = `{"item": "lamp", "quantity": 1000}`
	s.post("/orders", "order-3", tooMany)
	if status, replayed, body := s.post("/orders", "order-3", tooMany); status != http.StatusUnprocessableEntity || !replayed {
		t.Fatalf("out-of-stock retry: %d replayed=%v %s; want the stored 422", status, replayed, body)
	}
	// A path parameter that does not bind goes through the same handler.
	status, replayed, _ := s.post("/orders/abc/notes", "note-1", `{"text": "fragile"}`)
	if status != http.StatusBadRequest || replayed {
		t.Fatalf("unbindable parameter: %d replayed=%v; want 400", status, replayed)
	}
	if status, replayed, body := s.post("/orders/1/notes", "note-1", `{"text": "fragile"}`); status != http.StatusCreated || replayed {
		t.Fatalf("note under the same key: %d replayed=%v %s", status, replayed, body)
	}
	if n := s.orders(); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}
