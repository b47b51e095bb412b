package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// charges is a processor that does not deduplicate: every call is a
// charge, counted by the effect key it came with.
type charges struct {
	mu    sync.Mutex
	byKey map[string]int
	n     int
}

func (c *charges) charge(effectKey string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[string]int{}
	}
	c.n++
	c.byKey[effectKey]++
	return []byte(fmt.Sprintf("ch_%d", c.n))
}

// phaseServer serves POST /charges: the handler runs phase "charge"
// against proc, then ends as the X-End header says: "500" (the key is
// released), "panic" (the run dies; with takeover the retry takes over),
// or a 201 whose body is the phase's result.
func phaseServer(t *testing.T, store idemstore.Store, proc *charges, adjust ...func(*idem.Policy)) http.Handler {
	t.Helper()
	e, err := idem.New(idem.Config{
		Store:    store,
		Policies: []idem.Policy{idemtest.Policy("charge", "/charges", adjust...)},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	return e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := idem.Phase(r.Context(), "charge", func(_ context.Context, k string) ([]byte, error) {
			return proc.charge(k), nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		switch r.Header.Get("X-End") {
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
		case "panic":
			panic(http.ErrAbortHandler)
		default:
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(res)
		}
	}))
}

func postCharge(h http.Handler, key, end string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("X-End", end)
	w := httptest.NewRecorder()
	func() {
		defer func() { _ = recover() }()
		h.ServeHTTP(w, r)
	}()
	return w
}

func TestPhaseSkippedAfterRelease(t *testing.T) {
	proc := &charges{}
	h := phaseServer(t, memstore.New(), proc)
	if w := postCharge(h, "k1", "500"); w.Code != 500 {
		t.Fatalf("first run: %d %s", w.Code, w.Body)
	}
	w := postCharge(h, "k1", "")
	if w.Code != 201 || w.Body.String() != "ch_1" {
		t.Fatalf("retry: %d %q, want 201 with the first run's charge ch_1", w.Code, w.Body)
	}
	if proc.n != 1 {
		t.Fatalf("%d charges for one request, want 1", proc.n)
	}
}

func TestPhaseSkippedAfterTakeover(t *testing.T) {
	proc := &charges{}
	h := phaseServer(t, memstore.New(), proc, func(p *idem.Policy) { p.OnLeaseExpiry = idemstore.Takeover })
	postCharge(h, "k1", "panic") // abandoned: the lease ends at once
	w := postCharge(h, "k1", "")
	if w.Code != 201 || w.Body.String() != "ch_1" {
		t.Fatalf("takeover: %d %q, want 201 with ch_1", w.Code, w.Body)
	}
	if proc.n != 1 {
		t.Fatalf("%d charges for one request, want 1", proc.n)
	}
	// Another request is charged on its own, under its own effect key.
	postCharge(h, "k2", "")
	if proc.n != 2 || len(proc.byKey) != 2 {
		t.Fatalf("two requests: %d charges under %d keys, want 2 under 2", proc.n, len(proc.byKey))
	}
}

func TestPhaseErrorIsNotRecorded(t *testing.T) {
	store := memstore.New()
	e, err := idem.New(idem.Config{Store: store, Policies: []idem.Policy{idemtest.Policy("charge", "/charges")},
		Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := idem.Phase(r.Context(), "charge", func(_ context.Context, k string) ([]byte, error) {
			keys = append(keys, k)
			if len(keys) == 1 {
				return nil, errors.New("processor timed out")
			}
			return []byte("ch"), nil
		})
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	if w := postCharge(h, "k1", ""); w.Code != http.StatusBadGateway {
		t.Fatalf("first run: %d", w.Code)
	}
	if w := postCharge(h, "k1", ""); w.Code != http.StatusCreated {
		t.Fatalf("retry: %d", w.Code)
	}
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Fatalf("the phase ran with keys %q; want it run again, with the same effect key", keys)
	}
}

// phaselessStore is a store that keeps no phases.
type phaselessStore struct{ idemstore.Store }

func TestPhaseRefusals(t *testing.T) {
	if _, err := idem.Phase(context.Background(), "charge", nil); !errors.Is(err, idem.ErrNotProtected) {
		t.Errorf("outside a request: %v, want ErrNotProtected", err)
	}
	var errs []error
	run := func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }
	for _, tc := range []struct {
		store idemstore.Store
		want  error
		names []string
	}{
		{memstore.New(), idem.ErrPhaseReused, []string{"charge", "charge"}},
		{memstore.New(), idem.ErrEffectName, []string{"charge card"}},
		{phaselessStore{memstore.New()}, idem.ErrNoPhases, []string{"charge"}},
	} {
		e, err := idem.New(idem.Config{Store: tc.store, Policies: []idem.Policy{idemtest.Policy("charge", "/charges")},
			Tenant: func(*http.Request) (string, bool) { return "acme", true }})
		if err != nil {
			t.Fatal(err)
		}
		h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var err error
			for _, n := range tc.names {
				if _, err = idem.Phase(r.Context(), n, run); err != nil {
					break
				}
			}
			errs = append(errs, err)
			w.WriteHeader(http.StatusCreated)
		}))
		postCharge(h, "k1", "")
		if got := errs[len(errs)-1]; !errors.Is(got, tc.want) {
			t.Errorf("phases %q on %T: %v, want %v", tc.names, tc.store, got, tc.want)
		}
	}
}

// With a Sealer a phase's result is stored sealed, bound to its request
// and name; a replica without the sealer fails the phase rather than run
// it again.
func TestPhaseResultIsSealed(t *testing.T) {
	sealer, err := idemstore.NewAESGCM(idemstore.SealKey{ID: "k1", Key: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	store := &recordingStore{Store: memstore.New()}
	calls := 0
	serve := func(s idemstore.Sealer, status int) (string, error) {
		e, err := idem.New(idem.Config{Store: store, Policies: []idem.Policy{idemtest.Policy("charge", "/charges")},
			Tenant: func(*http.Request) (string, bool) { return "acme", true }, Sealer: s})
		if err != nil {
			t.Fatal(err)
		}
		var res []byte
		var perr error
		h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, perr = idem.Phase(r.Context(), "charge", func(context.Context, string) ([]byte, error) {
				calls++
				return []byte("card 4242, ch_1"), nil
			})
			w.WriteHeader(status)
		}))
		postCharge(h, "k1", "")
		return string(res), perr
	}
	if got, err := serve(sealer, http.StatusServiceUnavailable); err != nil || got != "card 4242, ch_1" {
		t.Fatalf("first run: %q, %v", got, err)
	}
	if len(store.recorded) != 1 || strings.Contains(string(store.recorded[0]), "4242") {
		t.Fatalf("the store was given %q; want one record, sealed", store.recorded)
	}
	if _, err := serve(nil, http.StatusServiceUnavailable); !errors.Is(err, idemstore.ErrUnreadable) {
		t.Fatalf("a replica without the sealer: %v, want ErrUnreadable", err)
	}
	if got, err := serve(sealer, http.StatusCreated); err != nil || got != "card 4242, ch_1" || calls != 1 {
		t.Fatalf("retry with the sealer: %q, %v, %d calls; want the recorded result and one call", got, err, calls)
	}
}

// recordingStore is a memstore that keeps every result it is asked to
// record, as it was given.
type recordingStore struct {
	*memstore.Store
	recorded [][]byte
}

func (s *recordingStore) RecordPhase(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error) {
	s.recorded = append(s.recorded, append([]byte(nil), result...))
	return s.Store.RecordPhase(ctx, id, name, result, ttl)
}
