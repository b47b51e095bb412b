package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore/pgstoretest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

const testSecret = "deployment-label-secret"

// keysStore is a store under test, the --database-url that names it and
// the other flags it needs.
type keysStore struct {
	name  string
	store idemstore.Store
	url   string
	flags []string
}

// keysStores are the stores the keys tests run on, by name.
var keysStores = []struct {
	name string
	open func(*testing.T) keysStore
}{{"sqlite", sqliteKeysStore}, {"postgres", pgKeysStore}, {"redis", redisKeysStore}, {"redis-cluster", redisClusterKeysStore}}

// eachKeysStore runs fn as a subtest on each of keysStores.
func eachKeysStore(t *testing.T, fn func(t *testing.T, st keysStore)) {
	t.Helper()
	for _, kind := range keysStores {
		t.Run(kind.name, func(t *testing.T) { fn(t, kind.open(t)) })
	}
}

// keys runs `idemgen keys args...` against st.
func (st keysStore) keys(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return keys(t, st.url, stdin, append(slices.Clip(st.flags), args...)...)
}

func sqliteKeysStore(t *testing.T) keysStore {
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return keysStore{name: "sqlite", store: s, url: "sqlite:" + path}
}

func pgKeysStore(t *testing.T) keysStore {
	s, url := pgstoretest.New(t)
	return keysStore{name: "postgres", store: s, url: url}
}

// keysPolicy is the fail-closed transfer operation of the keys tests.
func keysPolicy() idem.Policy {
	return idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) {
		p.MaxSnapshotBytes = 1 << 20
		p.Fingerprint = fingerprint.Spec{Body: []fingerprint.Field{{Pointer: "/amount", Type: fingerprint.Integer}}}
	})
}

// keysService is a fail-closed transfer API whose handler dies (panics)
// on the requests told to, as a process would die mid-request.
type keysService struct {
	t      *testing.T
	server http.Handler
	runs   atomic.Int64
	die    atomic.Bool
}

func newKeysService(t *testing.T, store idemstore.Store) *keysService {
	s := &keysService{t: t}
	e, err := idem.New(idem.Config{
		Store:          store,
		Policies:       []idem.Policy{keysPolicy()},
		Tenant:         func(*http.Request) (string, bool) { return "acme", true },
		KeyLabelSecret: []byte(testSecret),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.server = e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.runs.Add(1)
		if s.die.Load() {
			panic("the process died after charging the card")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_from_handler"}`))
	}))
	return s
}

func (s *keysService) post(key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount": 100}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	s.server.ServeHTTP(w, r)
	return w
}

// strand makes key indeterminate the way production does: its handler
// dies under a fail-closed policy, and the retry answers outcome-unknown.
func (s *keysService) strand(key string) {
	s.t.Helper()
	s.die.Store(true)
	if w := s.post(key); w.Code != http.StatusInternalServerError {
		s.t.Fatalf("dying request: status %d, body %s", w.Code, w.Body)
	}
	s.die.Store(false)
	w := s.post(key)
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "outcome-unknown") {
		s.t.Fatalf("retry of a dead request: status %d, body %s; want 409 outcome-unknown", w.Code, w.Body)
	}
}

// keys runs `idemgen keys args...` against url with stdin and returns the
// exit code, stdout and stderr.
func keys(t *testing.T, url, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(append([]string{"keys", "--database-url", url}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestKeysResolveEndToEnd(t *testing.T) {
	t.Setenv(envLabelSecret, testSecret)
	eachKeysStore(t, func(t *testing.T, st keysStore) {
		svc := newKeysService(t, st.store)
		svc.strand("order-0048213")
		label := idemstore.KeyLabel([]byte(testSecret), "order-0048213")

		// list finds it by state, under the label the logs use.
		code, out, errOut := st.keys(t, "", "list", "--state", "indeterminate", "--json")
		var listed []jsonEntry
		if code != 0 || json.Unmarshal([]byte(out), &listed) != nil {
			t.Fatalf("list: exit %d, stdout %s, stderr %s", code, out, errOut)
		}
		if len(listed) != 1 || listed[0].Label != label || listed[0].Key != "" || !listed[0].Resolvable || listed[0].Operation != "createTransfer" {
			t.Fatalf("list = %+v; want the one indeterminate key, by label %s only", listed, label)
		}
		if code, out, _ := st.keys(t, "", "list", "--state", "completed"); code != 0 || !strings.Contains(out, "(no keys)") {
			t.Fatalf("list --state completed: exit %d, %s", code, out)
		}

		// show, by the label from the logs.
		code, out, errOut = st.keys(t, "", "show", "--label", label, "--json")
		var shown jsonEntry
		if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.State != "indeterminate" || shown.Version == "" {
			t.Fatalf("show: exit %d, stdout %s, stderr %s", code, out, errOut)
		}

		resolve := []string{"resolve", "--label", label, "--status", "201",
			"--header", "Content-Type: application/json", "--body", `{"id":"tr_found_by_support"}`}
		// A wrong version changes nothing.
		if code, _, errOut := st.keys(t, "", append(resolve, "--expect", "000000000000", "--yes")...); code != 1 || !strings.Contains(errOut, "changed") {
			t.Fatalf("resolve with a stale version: exit %d, stderr %s", code, errOut)
		}
		// Without --yes it asks, and a "no" changes nothing.
		if code, _, errOut := st.keys(t, "n\n", append(resolve, "--expect", shown.Version)...); code != 1 || !strings.Contains(errOut, "Proceed?") {
			t.Fatalf("resolve declined: exit %d, stderr %s", code, errOut)
		}
		if w := svc.post("order-0048213"); w.Code != http.StatusConflict {
			t.Fatalf("after a declined resolve the key answers %d, want 409", w.Code)
		}
		if code, out, errOut := st.keys(t, "y\n", append(resolve, "--expect", shown.Version)...); code != 0 || !strings.Contains(out, "resolved "+label) {
			t.Fatalf("resolve: exit %d, stdout %s, stderr %s", code, out, errOut)
		}

		// The retry replays the resolution; the handler does not run.
		runs := svc.runs.Load()
		w := svc.post("order-0048213")
		if w.Code != http.StatusCreated || w.Body.String() != `{"id":"tr_found_by_support"}` ||
			w.Header().Get("Idempotent-Replayed") != "true" || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("retry after resolve: %d %v %s; want the replayed resolution", w.Code, w.Header(), w.Body)
		}
		if svc.runs.Load() != runs {
			t.Fatal("the handler ran again after the key was resolved")
		}
		// The same version no longer matches: the key changed.
		if code, _, errOut := st.keys(t, "", append(resolve, "--expect", shown.Version, "--yes")...); code != 1 || !strings.Contains(errOut, "changed") {
			t.Fatalf("second resolve: exit %d, stderr %s", code, errOut)
		}

		// forget: the next retry runs the operation.
		svc.strand("order-0048214")
		code, out, _ = st.keys(t, "", "show", "--tenant", "acme", "--scope", "createTransfer", "--key", "order-0048214", "--json")
		if code != 0 || json.Unmarshal([]byte(out), &shown) != nil {
			t.Fatalf("show by key: exit %d, %s", code, out)
		}
		if code, _, errOut := st.keys(t, "", "resolve", "--tenant", "acme", "--scope", "createTransfer", "--key", "order-0048214",
			"--expect", shown.Version, "--forget", "--yes"); code != 0 {
			t.Fatalf("forget: exit %d, stderr %s", code, errOut)
		}
		runs = svc.runs.Load()
		if w := svc.post("order-0048214"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" || svc.runs.Load() != runs+1 {
			t.Fatalf("retry after forget: %d, replayed %q, runs %d→%d; want the handler to run", w.Code, w.Header().Get("Idempotent-Replayed"), runs, svc.runs.Load())
		}

		// stats counts both, now completed; nothing in flight.
		code, out, errOut = st.keys(t, "", "stats", "--json")
		var stats jsonStatsOut
		if code != 0 || json.Unmarshal([]byte(out), &stats) != nil {
			t.Fatalf("stats: exit %d, stdout %s, stderr %s", code, out, errOut)
		}
		if len(stats.Counts) != 1 || stats.Counts[0].State != "completed" || stats.Counts[0].Keys != 2 || stats.OldestInFlight != nil {
			t.Fatalf("stats = %+v; want 2 completed createTransfer keys and none in flight", stats)
		}
	})
}

// A body read from standard input leaves no way to confirm there: without
// --yes the command is refused before it touches anything, instead of
// reading the end of the body as a "no".
func TestKeysResolveBodyFromStdinNeedsYes(t *testing.T) {
	code, _, errOut := keys(t, "sqlite://unused.db", `{"ok":true}`, "resolve", "--label", "hmac:00", "--expect", "v",
		"--status", "201", "--body-file", "-")
	if code != 2 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("resolve --body-file - without --yes: exit %d, stderr %s; want 2 naming --yes", code, errOut)
	}
}
