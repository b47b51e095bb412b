package idem_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// A label is keyed: a reader without the secret cannot test guesses
// against it, and the same secret gives the same label on every replica.
func TestKeyLabelIsKeyed(t *testing.T) {
	a := idemstore.KeyLabel([]byte("secret-a"), "order-0048213")
	if a != idemstore.KeyLabel([]byte("secret-a"), "order-0048213") {
		t.Fatal("the same secret and key give different labels")
	}
	if a == idemstore.KeyLabel([]byte("secret-b"), "order-0048213") {
		t.Fatal("two secrets give the same label")
	}
	if a == idemstore.KeyLabel([]byte("secret-a"), "order-0048214") {
		t.Fatal("two keys give the same label")
	}
	// The unsalted label of old: anyone could recompute it from a guess.
	if strings.Contains(a, "sha256:") || !strings.HasPrefix(a, "hmac:") || len(a) != len("hmac:")+20 {
		t.Fatalf("label %q is not hmac: and 20 hex digits", a)
	}
}

// labelled is an engine over a memstore with a known label secret, a clock,
// a log buffer and an observer channel.
type labelled struct {
	clock  *storetest.Clock
	logs   bytes.Buffer
	events chan idem.Event
	server http.Handler
}

var labelSecret = []byte("deployment-secret")

func newLabelled(t *testing.T, handler http.HandlerFunc) *labelled {
	t.Helper()
	l := &labelled{clock: storetest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), events: make(chan idem.Event, 16)}
	e, err := idem.New(idem.Config{
		Store:          memstore.New(memstore.WithClock(l.clock.Now)),
		Policies:       []idem.Policy{transferPolicy()},
		Tenant:         func(*http.Request) (string, bool) { return "acme", true },
		Logger:         slog.New(slog.NewTextHandler(&l.logs, nil)),
		KeyLabelSecret: labelSecret,
		Observer:       idem.ObserverFunc(func(_ context.Context, ev idem.Event) { l.events <- ev }),
	})
	if err != nil {
		t.Fatal(err)
	}
	l.server = e.Middleware(handler)
	return l
}

func (l *labelled) post(key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	l.server.ServeHTTP(w, r)
	return w
}

// A fail-closed key that becomes indeterminate is logged at WARN with the
// operation, the tenant and the keyed label; the observer's events carry
// the label and the state each request met.
func TestIndeterminateIsLoggedAndObservedByLabel(t *testing.T) {
	l := newLabelled(t, func(http.ResponseWriter, *http.Request) { panic("card network timed out") })
	const key = "order-0048213"
	label := idemstore.KeyLabel(labelSecret, key)
	expect(t, l.post(key), http.StatusInternalServerError, "handler-failed")
	logs := l.logs.String()
	warn := lineWith(logs, "now indeterminate")
	if warn == "" {
		t.Fatalf("no log line says the key became indeterminate:\n%s", logs)
	}
	for _, attr := range []string{"level=WARN", "operation=createTransfer", "tenant=acme", "key=" + label} {
		if !strings.Contains(warn, attr) {
			t.Errorf("indeterminate log line lacks %s: %s", attr, warn)
		}
	}
	if strings.Contains(logs, key) {
		t.Fatalf("logs carry the raw key:\n%s", logs)
	}
	if ev := <-l.events; ev.KeyLabel != label || ev.Outcome != idem.OutcomePanicked || ev.State != "" {
		t.Fatalf("first event: label %q, outcome %s, state %q; want %q, panicked, no state", ev.KeyLabel, ev.Outcome, ev.State, label)
	}
	expect(t, l.post(key), http.StatusConflict, "outcome-unknown")
	if ev := <-l.events; ev.KeyLabel != label || ev.State != idemstore.StateIndeterminate {
		t.Fatalf("retry event: label %q, state %q; want %q, indeterminate", ev.KeyLabel, ev.State, label)
	}
}

// A completion fenced out (here by a retry that failed the key closed
// while the handler ran) is logged at WARN with the tenant and the label.
func TestFencedCompletionIsLoggedByLabel(t *testing.T) {
	var l *labelled
	first := true
	l = newLabelled(t, func(w http.ResponseWriter, r *http.Request) {
		if first {
			first = false
			// While this request runs, its lease runs out and a retry
			// (fail-closed policy: marks it indeterminate) comes in.
			l.clock.Advance(2 * time.Minute)
			expect(t, l.post("k-fenced"), http.StatusConflict, "outcome-unknown")
		}
		w.WriteHeader(http.StatusCreated)
	})
	w := l.post("k-fenced")
	expect(t, w, http.StatusConflict, "request-in-progress")
	line := lineWith(l.logs.String(), "taken over")
	if line == "" || !strings.Contains(line, "level=WARN") || !strings.Contains(line, "tenant=acme") ||
		!strings.Contains(line, "key="+idemstore.KeyLabel(labelSecret, "k-fenced")) {
		t.Fatalf("fenced completion not logged at WARN with tenant and label:\n%s", l.logs.String())
	}
}

func lineWith(logs, s string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
