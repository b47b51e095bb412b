package main_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// dial opens a raw connection to the server.
func dial(t *testing.T, s *labtest.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// healthz sends GET /healthz on c and reads the answer, which must come
// within d.
func healthz(c net.Conn, br *bufio.Reader, d time.Duration) error {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: petstore\r\n\r\n"); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("healthz: %s", res.Status)
	}
	return nil
}

// closedWithin waits up to d for the server to close c, reading and
// discarding whatever it sends first, and returns how long that took.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v", d)
	}
	return time.Since(start)
}

// TestIdleConnectionsClosed: a keep-alive connection that sends nothing
// after its request is closed by the server after --idle-timeout.
func TestIdleConnectionsClosed(t *testing.T) {
	t.Parallel()
	s := bins.StartServer(t, labtest.SQLiteURL(t), "--idle-timeout", "300ms")
	const n = 20
	var wg sync.WaitGroup
	for range n {
		c := dial(t, s)
		wg.Go(func() {
			if err := healthz(c, bufio.NewReader(c), 5*time.Second); err != nil {
				t.Error(err)
				return
			}
			if took := closedWithin(t, c, 5*time.Second); took < 200*time.Millisecond {
				t.Errorf("an idle connection was closed after %v, before the idle timeout", took)
			}
		})
	}
	wg.Wait()
}

// TestSlowBodyCutOff: a body dribbled a byte at a time is cut off by
// --read-timeout, not read to its end.
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	s := bins.StartServer(t, labtest.SQLiteURL(t), "--read-timeout", "500ms")
	c := dial(t, s)
	body := `{"owner":"slow","currency":"EUR","initial_balance":1,"padding":"` + strings.Repeat("x", 60) + `"}`
	head := "POST /accounts HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer " + labtest.KeyAcme +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	// One byte every 100 ms: the whole body would take about 10 s.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := range len(body) {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	if took := closedWithin(t, c, 5*time.Second); took > 3*time.Second {
		t.Errorf("the dribbling connection was closed after %v; the read timeout is 500ms", took)
	}
}

// TestConnectionBound: with --max-conns 2, a third connection is closed
// at once instead of waiting unread, and once one of the first two closes,
// a new connection is served.
func TestConnectionBound(t *testing.T) {
	t.Parallel()
	s := bins.StartServer(t, labtest.SQLiteURL(t), "--max-conns", "2")
	first, second := dial(t, s), dial(t, s)
	for _, c := range []net.Conn{first, second} {
		if err := healthz(c, bufio.NewReader(c), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	third := dial(t, s)
	if err := healthz(third, bufio.NewReader(third), 5*time.Second); err == nil {
		t.Fatal("a third connection was served while two were open")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a third connection was left waiting instead of closed: %v", err)
	}
	_ = first.Close()
	for range 100 {
		c := dial(t, s)
		if err := healthz(c, bufio.NewReader(c), 5*time.Second); err == nil {
			return
		}
		_ = c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no new connection was served after the first closed")
}

// holdWriteLock takes SQLite's write lock on the database at url (a
// sqlite: URL) until the returned function is called.
func holdWriteLock(t *testing.T, url string) func() {
	t.Helper()
	db, err := sql.Open("sqlite", strings.TrimPrefix(url, "sqlite:")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	return func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		_ = conn.Close()
	}
}

// TestAdmissionSheds: with --max-in-flight 1 and no queue, a request that
// comes while another is being served is answered 503 server-overloaded
// with Retry-After at once, and nothing of it is kept: its key runs as a
// first try afterwards. Idle keep-alive connections hold no capacity.
func TestAdmissionSheds(t *testing.T) {
	t.Parallel()
	dbURL := labtest.SQLiteURL(t)
	s := bins.StartServer(t, dbURL, "--max-in-flight", "1", "--max-queue", "0", "--metrics")
	c := labtest.NewClient(t, s, labtest.KeyAcme)
	c.Expect(http.StatusOK, "GET", "/accounts", "", "")

	// Three keep-alive connections that sent a request and stay open.
	for range 3 {
		conn := dial(t, s)
		br := bufio.NewReader(conn)
		if _, err := io.WriteString(conn, "GET /accounts HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer "+labtest.KeyAcme+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	c.Expect(http.StatusOK, "GET", "/accounts", "", "")

	release := holdWriteLock(t, dbURL)
	held := make(chan labtest.Response, 1)
	go func() {
		held <- c.Must("POST", "/accounts", "held", `{"owner":"held","currency":"EUR","initial_balance":1}`)
	}()
	admitted := ""
	for range 500 {
		if admitted = s.Metric(t, "petstore_admission_admitted_total"); admitted == "6" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if admitted != "6" {
		release()
		t.Fatalf("the held request was not admitted (admitted %q, want 6)", admitted)
	}
	const body = `{"owner":"shed","currency":"EUR","initial_balance":1}`
	r := c.ExpectProblem(http.StatusServiceUnavailable, "server-overloaded", "POST", "/accounts", "shed", body)
	release()
	// The shedder's hint is the time its queue takes to drain, at most
	// its RetryAfter: here a held request or two, so 0 to 2 seconds.
	if ra := r.Header.Get("Retry-After"); ra != "0" && ra != "1" && ra != "2" {
		t.Errorf("Retry-After %q, want 0, 1 or 2", ra)
	}
	if h := <-held; h.Status != http.StatusCreated {
		t.Fatalf("the held request: %s", h)
	}
	again := c.Expect(http.StatusCreated, "POST", "/accounts", "shed", body)
	if again.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the shed request's retry was a replay: the 503 was stored")
	}
	if got := s.Metric(t, `petstore_admission_refused_total{reason="full"}`); got != "1" {
		t.Errorf("refused as full: %q, want 1", got)
	}
}

// TestHeaderBound: a header block beyond 64 KiB is refused with 431.
func TestHeaderBound(t *testing.T) {
	t.Parallel()
	s := bins.StartServer(t, labtest.SQLiteURL(t))
	c := labtest.NewClient(t, s, labtest.KeyAcme)
	req, err := http.NewRequest("GET", s.URL+"/accounts", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+labtest.KeyAcme)
	req.Header.Set("X-Padding", strings.Repeat("p", 100<<10))
	res, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 100 KiB header: %s, want 431", res.Status)
	}
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, so that a test can be two client addresses at once.
func clientFrom(t *testing.T, s *labtest.Server, apiKey, ip string) *labtest.Client {
	c := labtest.NewClient(t, s, apiKey)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c.HTTP.Transport = &http.Transport{DialContext: d.DialContext}
	return c
}

// TestFailedAuthThrottled: 40 wrong keys in a burst from one address get
// ten 401s (the default --auth-failures) and then 429 with Retry-After;
// the address is refused even with a right key until it has waited, while
// another address is not affected.
func TestFailedAuthThrottled(t *testing.T) {
	t.Parallel()
	s := bins.StartServer(t, labtest.SQLiteURL(t))
	const burst = 40
	statuses := make([]labtest.Response, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			wrong := clientFrom(t, s, "guess-"+strconv.Itoa(i), "127.0.0.1")
			statuses[i] = wrong.Must("GET", "/accounts", "", "")
		})
	}
	wg.Wait()
	n401, n429, retryAfter := 0, 0, 0
	for _, r := range statuses {
		switch r.Status {
		case 401:
			n401++
		case 429:
			n429++
			labtest.CheckProblem(t, r, 429, "rate-limited")
			ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
			if err != nil || ra < 1 {
				t.Fatalf("429 with Retry-After %q", r.Header.Get("Retry-After"))
			}
			retryAfter = max(retryAfter, ra)
		default:
			t.Fatalf("a wrong key got %s", r)
		}
	}
	// One more token may have trickled in while the burst ran (one every 6 s).
	if n401 < 10 || n401 > 11 || n429 != burst-n401 {
		t.Fatalf("%d × 401 and %d × 429 for %d wrong keys; want 10 failures, then 429", n401, n429, burst)
	}

	right := clientFrom(t, s, labtest.KeyAcme, "127.0.0.1")
	right.ExpectProblem(429, "rate-limited", "GET", "/accounts", "", "")
	other := clientFrom(t, s, labtest.KeyAcme, "127.0.0.2")
	other.Expect(200, "GET", "/accounts", "", "")
	clientFrom(t, s, "guess", "127.0.0.2").ExpectProblem(401, "unauthorized", "GET", "/accounts", "", "")

	time.Sleep(time.Duration(retryAfter) * time.Second)
	right.Expect(200, "GET", "/accounts", "", "")
}

// TestAPIKeysFromEnvAndFile: keys come from API_KEYS or --api-keys-file,
// never both with --api-keys.
func TestAPIKeysFromEnvAndFile(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, s *labtest.Server, good, bad string) {
		labtest.NewClient(t, s, good).Expect(200, "GET", "/accounts", "", "")
		labtest.NewClient(t, s, bad).ExpectProblem(401, "unauthorized", "GET", "/accounts", "", "")
	}
	t.Run("env", func(t *testing.T) {
		s := labtest.Launch(t, bins.Server, []string{"API_KEYS=env-key=acme"}, "--database-url", labtest.SQLiteURL(t))
		check(t, s, "env-key", "demo-key-acme")
	})
	t.Run("file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "keys")
		keys := "# the tenants' keys\nfile-key-1=acme\nfile-key-2=globex # added for globex\n\n"
		if err := os.WriteFile(file, []byte(keys), 0o600); err != nil {
			t.Fatal(err)
		}
		s := labtest.Launch(t, bins.Server, []string{"API_KEYS=env-key=acme"}, "--database-url", labtest.SQLiteURL(t), "--api-keys-file", file)
		check(t, s, "file-key-2", "env-key")
		labtest.NewClient(t, s, "file-key-1").Expect(200, "GET", "/accounts", "", "")
	})
	t.Run("both", func(t *testing.T) {
		out, code := runToExit(t, nil, "--database-url", labtest.SQLiteURL(t), "--api-keys", labtest.APIKeys, "--api-keys-file", "keys")
		if code != 2 || !strings.Contains(out, "not both") {
			t.Fatalf("--api-keys with --api-keys-file: exit %d\n%s", code, out)
		}
	})
}

// runToExit runs the binary, which must exit on its own within 30 s, and
// returns what it logged and its exit code.
func runToExit(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.Server, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%v: did not exit within 30 s\n%s", args, out)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestDatabasePasswordNeverLogged: a database URL the server cannot use,
// for whatever reason, never puts its password into the log.
func TestDatabasePasswordNeverLogged(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-Pa55"
	urls := []string{
		"mysql://app:" + secret + "@127.0.0.1/payments",
		"host=127.0.0.1 user=app password=" + secret + " dbname=payments",
		"postgres://app:" + secret + "@127.0.0.1:1/payments?connect_timeout=2",
		"postgres://app@127.0.0.1:1/payments?connect_timeout=2&password=" + secret,
		"postgres://app:" + secret + "@[::1/payments",
	}
	if base := os.Getenv("IDEMGEN_TEST_DATABASE_URL"); base != "" {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(u.User.Username(), secret)
		u.Path = "/payments_missing_" + labtest.RandomHex(4)
		urls = append(urls, u.String())
	}
	for _, dbURL := range urls {
		for _, env := range [][]string{nil, {"DATABASE_URL=" + dbURL}} {
			args := []string{"--database-url", dbURL}
			if env != nil {
				args = nil
			}
			out, code := runToExit(t, env, args...)
			if code == 0 {
				t.Errorf("%s: the server started", dbURL)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, secret) {
					t.Errorf("the password is in the log: %s", line)
				}
			}
			if strings.Contains(dbURL, "payments_missing_") && !strings.Contains(out, "createdb payments_missing_") {
				t.Errorf("a missing database is not explained with createdb:\n%s", out)
			}
		}
	}
}
