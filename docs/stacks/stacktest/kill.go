package stacktest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Service is what the kill scenarios need to know of a stack page's
// service.
type Service struct {
	// Env is the environment of a child that serves as the service does.
	Env []string
	// Stuck is the environment of a child whose handler, once it has
	// written, creates the file Written and never returns, so that its
	// transaction is open when the child is killed.
	Stuck   []string
	Written string
	// Request returns the request the scenarios send and retry, addressed
	// to the service at base.
	Request func(base string) *http.Request
	// Rows counts the rows the request's handler writes.
	Rows func(t testing.TB) int
}

// The environment Main reads in a child: the database to serve, and
// whether the handler hangs after its write.
const (
	envDB    = "STACKTEST_CHILD_DB"
	envStuck = "STACKTEST_CHILD_STUCK"
)

// Main is the TestMain of a stack page's module. In a child that Start
// ran for SQLiteService, it serves through serve the database the test
// gave it, stuck true when the handler is to call Hang after its write;
// otherwise it runs the tests.
func Main(m *testing.M, serve func(db string, stuck bool) error) {
	db := os.Getenv(envDB)
	if db == "" {
		os.Exit(m.Run())
	}
	if err := serve(db, os.Getenv(envStuck) != ""); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
}

// Hang is where the handler of a stuck child (Main's stuck) goes once it
// has written to the database db: it creates the file the test waits for
// and never returns, so that the transaction holding the write is open
// when the test kills the child.
func Hang(db string) error {
	if err := os.WriteFile(written(db), nil, 0o600); err != nil {
		return err
	}
	select {}
}

func written(db string) string { return db + ".written" }

// SQLiteService is the service of a stack page's module whose TestMain is
// Main, on a SQLite database of the test's own with the pages' orders
// table, sent the pages' curl command.
func SQLiteService(t *testing.T) Service {
	path := filepath.Join(t.TempDir(), "orders.db")
	return Service{
		Env:     []string{envDB + "=" + path},
		Stuck:   []string{envDB + "=" + path, envStuck + "=1"},
		Written: written(path),
		Request: func(base string) *http.Request { return NewRequest(base, "order-1", Order) },
		Rows: func(t testing.TB) int {
			store, err := sqlitestore.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			return Orders(t, store)
		},
	}
}

// Kills runs both kill scenarios, ReplayedAfterKill and
// OneRowAfterKillMidHandler, on SQLiteService, each a subtest.
func Kills(t *testing.T) {
	t.Run("replayed after kill", func(t *testing.T) { ReplayedAfterKill(t, SQLiteService(t)) })
	t.Run("one row after kill mid-handler", func(t *testing.T) { OneRowAfterKillMidHandler(t, SQLiteService(t)) })
}

// ReplayedAfterKill: a service killed with SIGKILL after it answered the
// request, and started again, answers the retry from its record: the same
// status, marked replayed, and one row.
func ReplayedAfterKill(t testing.TB, s Service) {
	t.Helper()
	base, kill := Start(t, s.Env...)
	first, body := Do(t, s.Request(base))
	if first.StatusCode >= 300 || first.Header.Get(problem.ReplayedHeader) != "" {
		t.Fatalf("first request: %d %s", first.StatusCode, body)
	}
	kill()
	base, _ = Start(t, s.Env...)
	retry, body := Do(t, s.Request(base))
	if retry.StatusCode != first.StatusCode || retry.Header.Get(problem.ReplayedHeader) != "true" {
		t.Fatalf("retry after SIGKILL: %d replayed=%q %s; want a replayed %d", retry.StatusCode, retry.Header.Get(problem.ReplayedHeader), body, first.StatusCode)
	}
	if n := s.Rows(t); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

// OneRowAfterKillMidHandler: a service killed with SIGKILL after its
// handler wrote but before its transaction committed leaves neither the
// row nor an answer for the key; started again, it runs the retry at once
// (not a 409 until the dead request's lease runs out), and there is one
// row.
func OneRowAfterKillMidHandler(t testing.TB, s Service) {
	t.Helper()
	base, kill := Start(t, s.Stuck...)
	go func() {
		// It gets no answer: the child dies under it.
		if res, err := http.DefaultClient.Do(s.Request(base)); err == nil {
			res.Body.Close()
		}
	}()
	WaitForFile(t, s.Written)
	kill()
	base, _ = Start(t, s.Env...)
	res, body := Do(t, s.Request(base))
	if res.StatusCode >= 300 || res.Header.Get(problem.ReplayedHeader) != "" {
		t.Fatalf("retry after SIGKILL mid-handler: %d replayed=%q %s; want it to run", res.StatusCode, res.Header.Get(problem.ReplayedHeader), body)
	}
	if n := s.Rows(t); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}
