package stacktest

import (
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/problem"
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
