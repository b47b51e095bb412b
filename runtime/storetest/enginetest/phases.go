package enginetest

import (
	"context"
	"fmt"
	mrand "math/rand"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// phaseLedger is the processor of PhaseStorm and what the handler's runs
// did, per logical request (the client's key).
type phaseLedger struct {
	mu     sync.Mutex
	rnd    *mrand.Rand
	calls  map[string]int             // processor calls, by request
	keys   map[string]map[string]bool // effect keys the processor saw, by request
	lost   map[string]int             // calls whose run died before the record
	charge map[string]string          // the charge the recorded call made
	n      int
}

// call is the processor's call of request k with effectKey; it reports
// the charge's id and whether the run dies before the phase's record.
func (l *phaseLedger) call(k, effectKey string, pDie float64) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	id := fmt.Sprintf("ch_%d", l.n)
	l.calls[k]++
	if l.keys[k] == nil {
		l.keys[k] = map[string]bool{}
	}
	l.keys[k][effectKey] = true
	if l.rnd.Float64() < pDie {
		l.lost[k]++
		return id, true
	}
	l.charge[k] = id
	return id, false
}

func (l *phaseLedger) draw() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rnd.Float64()
}

// PhaseStorm sends requests, each by clients at once, to an operation whose
// handler charges a processor in a recovery point (idem.Phase) and, by a
// seeded draw on every run, dies (panics, as a process would be killed)
// inside the phase after the processor's call, or after the phase, or
// answers. Every client retries its request until it has a 201. Then, for
// every request: the processor saw one effect key (a processor that
// honours keys charged once); it was called once, plus once for each run
// that died between a call and its record, never again after a record;
// and every 201, replays included, carries the recorded charge.
func PhaseStorm(t *testing.T, store idemstore.Store, transactional bool, requests, clients int) {
	t.Helper()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	l := &phaseLedger{rnd: mrand.New(mrand.NewSource(seed)), calls: map[string]int{}, keys: map[string]map[string]bool{},
		lost: map[string]int{}, charge: map[string]string{}}
	const pDie = 0.3
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("Idempotency-Key")
		if transactional {
			// Taken, so the engine sees the handler write through it.
			if _, err := idem.TxFor[any](r.Context(), "createCharge"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		res, err := idem.Phase(r.Context(), "charge", func(_ context.Context, effectKey string) ([]byte, error) {
			id, die := l.call(k, effectKey, pDie)
			if die {
				panic(http.ErrAbortHandler)
			}
			return []byte(id), nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if l.draw() < pDie {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(res)
	})
	// A run dies only by panicking, which ends its claim at once, so no
	// run outlives its lease: the lease is long for a loaded machine.
	es := ServeEngine(t, store, handler, EnginePolicy("createCharge", "/charges", 30*time.Second, idemstore.Takeover, transactional))
	answers := make([][]string, requests)
	var wg sync.WaitGroup
	for i := range requests {
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := fmt.Sprintf("req-%d", i)
				for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
					a, err := es.Post("/charges", k, `{"amount":500}`)
					if err == nil && a.Status == http.StatusCreated {
						l.mu.Lock()
						answers[i] = append(answers[i], string(a.Body))
						l.mu.Unlock()
						return
					}
					if err == nil && a.Status != http.StatusConflict && a.Status != http.StatusServiceUnavailable {
						t.Errorf("%s: %v", k, a)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				t.Errorf("%s: no 201 within a minute", k)
			}()
		}
	}
	wg.Wait()
	es.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	died := 0
	for i := range requests {
		k := fmt.Sprintf("req-%d", i)
		died += l.lost[k]
		if len(l.keys[k]) != 1 {
			t.Errorf("%s: the processor saw %d effect keys, want 1", k, len(l.keys[k]))
		}
		if want := 1 + l.lost[k]; l.calls[k] != want {
			t.Errorf("%s: %d processor calls, want %d (one, and one for each of the %d runs that died before its record)", k, l.calls[k], want, l.lost[k])
		}
		for _, body := range answers[i] {
			if body != l.charge[k] {
				t.Errorf("%s: answered charge %q, want the recorded %q", k, body, l.charge[k])
			}
		}
	}
	t.Logf("%d requests, %d clients each: %d processor calls, %d runs died between a call and its record, %d handler runs",
		requests, clients, l.n, died, es.totalRuns())
}

// totalRuns is how many times the handler ran, over every key.
func (es *EngineServer) totalRuns() int {
	es.mu.Lock()
	defer es.mu.Unlock()
	n := 0
	for _, r := range es.runs {
		n += r
	}
	return n
}

// PhaseOutlivesRetries holds a phase record to outlive every retry its
// client sends within the ttl of its first attempt (docs/semantics.md
// §8.2): a retry sent just inside the ttl, whose handler reaches the
// phase later into its run than the first run did, still meets the first
// run's record and does not call the downstream again.
func PhaseOutlivesRetries(t *testing.T, store idemstore.Store, transactional bool) {
	t.Helper()
	const (
		ttl   = 3 * time.Second
		lease = 2 * time.Second
	)
	var (
		mu    sync.Mutex
		calls int
		// called is when the first run called the downstream, a moment
		// before its record was made.
		called time.Time
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if transactional {
			if _, err := idem.TxFor[any](r.Context(), "createCharge"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		mu.Lock()
		retry := !called.IsZero()
		reach := called.Add(ttl + lease/4)
		mu.Unlock()
		if retry {
			// The step before the phase is slower on the retry: the
			// phase is reached past the ttl of the first run's record,
			// well within the retry's lease.
			time.Sleep(time.Until(reach))
		}
		res, err := idem.Phase(r.Context(), "charge", func(context.Context, string) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if called.IsZero() {
				called = time.Now()
			}
			return []byte("ch_1"), nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if !retry {
			// A later step fails for a moment: not kept, so the client
			// retries.
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(res)
	})
	p := EnginePolicy("createCharge", "/charges", lease, idemstore.Takeover, transactional)
	p.TTL = ttl
	es := ServeEngine(t, store, handler, p)
	if a := es.MustPost(t, "/charges", "k1", `{"amount":100}`); a.Status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: %v", a)
	}
	mu.Lock()
	send := called.Add(ttl - lease/4)
	mu.Unlock()
	// The client's last retry, sent inside the ttl of its first attempt.
	time.Sleep(time.Until(send))
	a := es.MustPost(t, "/charges", "k1", `{"amount":100}`)
	mu.Lock()
	defer mu.Unlock()
	if a.Status != http.StatusCreated || string(a.Body) != "ch_1" {
		t.Errorf("retry: %v, want 201 with the recorded ch_1", a)
	}
	if calls != 1 {
		t.Errorf("a retry sent %v after the first attempt's phase, inside the ttl (%v), reached the phase %v after it and called the downstream again: %d calls, want 1",
			ttl-lease/4, ttl, ttl+lease/4, calls)
	}
}
