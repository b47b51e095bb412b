package main_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// serverBinary is the service, labBinary the lab's server (the service
// with the switches of the lab's days and benchmarks: --chaos-delay,
// --idempotency=off or handwritten) and processorBinary the fake payment
// processor of the days with effects, all built once for the whole run by
// TestMain, in binDir, where tests build other commands they need
// (idemgenBinary).
var serverBinary, labBinary, processorBinary, binDir string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "petstore-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	defer redisCluster.Stop()
	binDir = dir
	serverBinary = filepath.Join(dir, "petstore-payments")
	labBinary = filepath.Join(dir, "petstore-lab")
	processorBinary = filepath.Join(dir, "processor")
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), ".", "./lab/cmd/petstore-lab", "./lab/cmd/processor")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the servers:", err)
		return 1
	}
	return m.Run()
}

const (
	keyAcme   = "key-acme"
	keyGlobex = "key-globex"
	apiKeys   = keyAcme + "=acme," + keyGlobex + "=globex"
)

// server is one running server process.
type server struct {
	t    testing.TB
	cmd  *exec.Cmd
	URL  string
	mu   sync.Mutex
	logs bytes.Buffer
	done chan error
}

var listening = regexp.MustCompile(`listening on (\S+?)"? `)

// startServer runs the service on a free loopback port with the database
// and extra flags, and waits for it to log the bound address.
func startServer(t testing.TB, databaseURL string, flags ...string) *server {
	t.Helper()
	return launch(t, serverBinary, nil, append([]string{"--database-url", databaseURL, "--api-keys", apiKeys}, flags...)...)
}

// startLab is startServer for the lab's server, which also takes the
// lab's flags.
func startLab(t testing.TB, databaseURL string, flags ...string) *server {
	t.Helper()
	return launch(t, labBinary, nil, append([]string{"--database-url", databaseURL, "--api-keys", apiKeys}, flags...)...)
}

// launch runs the binary bin with env added to the test's environment and
// args after --addr, and waits for it to log the bound address.
func launch(t testing.TB, bin string, env []string, args ...string) *server {
	t.Helper()
	args = append([]string{"--addr", "127.0.0.1:0"}, args...)
	s := &server{t: t, cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Dir = t.TempDir()
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		s.done <- s.cmd.Wait()
	}()
	t.Cleanup(func() { s.stop() })
	select {
	case a := <-addr:
		s.URL = "http://" + a
	case err := <-s.done:
		s.done <- err
		t.Fatalf("server exited before listening: %v\n%s", err, s.Logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not log its address\n%s", s.Logs())
	}
	return s
}

// Logs returns what the server logged so far.
func (s *server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// stop sends SIGTERM and expects a clean exit; a killed server is left be.
func (s *server) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil && !strings.Contains(err.Error(), "killed") {
			s.t.Errorf("server exit after SIGTERM: %v\n%s", err, s.Logs())
		}
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		s.t.Errorf("server did not stop within 15s of SIGTERM\n%s", s.Logs())
	}
}

// kill9 kills the server with SIGKILL and waits for it to be gone.
func (s *server) kill9() {
	_ = s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err
}

// response is one HTTP answer.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body)) }

// client sends requests as one tenant.
type client struct {
	t      *testing.T
	base   string
	apiKey string
	http   *http.Client
	// opened is the sum of the initial balances of the accounts this client
	// opened.
	opened int64
}

func newClient(t *testing.T, s *server, apiKey string) *client {
	return &client{t: t, base: s.URL, apiKey: apiKey, http: &http.Client{Timeout: 30 * time.Second}}
}

// do sends a request; idemKey "" sends no Idempotency-Key.
func (c *client) do(method, path, idemKey, body string) (response, error) {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}, err
}

// must is do, failing the test on a transport error.
func (c *client) must(method, path, idemKey, body string) response {
	c.t.Helper()
	r, err := c.do(method, path, idemKey, body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// expect checks the status and returns the response.
func (c *client) expect(status int, method, path, idemKey, body string) response {
	c.t.Helper()
	r := c.must(method, path, idemKey, body)
	if r.Status != status {
		c.t.Fatalf("%s %s: got %s, want %d", method, path, r, status)
	}
	return r
}

// expectProblem checks status, content type and the problem type's name.
func (c *client) expectProblem(status int, name, method, path, idemKey, body string) response {
	c.t.Helper()
	r := c.expect(status, method, path, idemKey, body)
	checkProblem(c.t, r, status, name)
	return r
}

func checkProblem(t *testing.T, r response, status int, name string) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, r)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, r.Body)
	}
	if !strings.HasSuffix(p.Type, "/"+name) || p.Status != status || p.Title == "" {
		t.Fatalf("got problem %s, want type …/%s and status %d", r, name, status)
	}
}

func (c *client) createAccount(owner, currency string, balance int64) string {
	c.t.Helper()
	r := c.expect(201, "POST", "/accounts", "", fmt.Sprintf(`{"owner":%q,"currency":%q,"initial_balance":%d}`, owner, currency, balance))
	c.opened += balance
	return r.json(c.t)["id"].(string)
}

func (c *client) balance(id string) int64 {
	c.t.Helper()
	r := c.expect(200, "GET", "/accounts/"+url.PathEscape(id), "", "")
	return int64(r.json(c.t)["balance"].(float64))
}

type transfer struct {
	ID          string `json:"id"`
	FromAccount string `json:"from_account"`
	ToAccount   string `json:"to_account"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Memo        string `json:"memo"`
	CreatedAt   string `json:"created_at"`
}

func (c *client) transfers(account string) []transfer {
	c.t.Helper()
	r := c.expect(200, "GET", "/accounts/"+url.PathEscape(account)+"/transfers", "", "")
	var out struct{ Transfers []transfer }
	if err := json.Unmarshal(r.Body, &out); err != nil {
		c.t.Fatal(err)
	}
	return out.Transfers
}

type account struct {
	ID      string `json:"id"`
	Owner   string `json:"owner"`
	Balance int64  `json:"balance"`
}

func (c *client) accounts() []account {
	c.t.Helper()
	r := c.expect(200, "GET", "/accounts", "", "")
	var out struct{ Accounts []account }
	if err := json.Unmarshal(r.Body, &out); err != nil {
		c.t.Fatal(err)
	}
	return out.Accounts
}

// total is the sum of every balance of the client's tenant.
func (c *client) total() int64 {
	var sum int64
	for _, a := range c.accounts() {
		sum += a.Balance
	}
	return sum
}

func transferBody(from, to string, amount any, memo string) string {
	return fmt.Sprintf(`{"from_account":%q,"to_account":%q,"amount":%v,"currency":"EUR","memo":%q}`, from, to, amount, memo)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// databases are the two databases a test runs on, each named and made
// fresh for the test by its function.
var databases = []struct {
	name string
	url  func(testing.TB) string
}{{"SQLite", sqliteURL}, {"Postgres", postgresURL}}

// sqliteURL is a fresh SQLite database in a test's temp dir.
func sqliteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "payments.db")
}

// postgresURL creates a database of its own for the test and drops it at
// the end; without IDEMGEN_TEST_DATABASE_URL the test is skipped.
func postgresURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv("IDEMGEN_TEST_DATABASE_URL")
	if base == "" {
		t.Skip("IDEMGEN_TEST_DATABASE_URL is unset; set it to a PostgreSQL URL to run the PostgreSQL end-to-end tests")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to IDEMGEN_TEST_DATABASE_URL: %v", err)
	}
	name := "petstore_e2e_" + randomHex(6)
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
