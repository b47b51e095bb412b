package dayreplay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// refusingServer opens accounts and answers every transfer 503, so that
// every client gives up without an answer; it counts the transfers that
// came with a changed amount.
type refusingServer struct {
	mu       sync.Mutex
	accounts []map[string]any
	changed  atomic.Int64
}

func (s *refusingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/accounts":
		var in struct {
			Owner          string `json:"owner"`
			InitialBalance int64  `json:"initial_balance"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		a := map[string]any{"id": fmt.Sprintf("acc%d", len(s.accounts)), "owner": in.Owner, "balance": in.InitialBalance}
		s.accounts = append(s.accounts, a)
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(a)
	case r.Method == http.MethodPost && r.URL.Path == "/transfers":
		var in struct{ Memo string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		if strings.HasSuffix(in.Memo, "#changed") {
			s.changed.Add(1)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	case r.Method == http.MethodGet && r.URL.Path == "/accounts":
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"accounts": s.accounts})
	case r.Method == http.MethodGet:
		_ = json.NewEncoder(w).Encode(map[string]any{"transfers": []any{}})
	default:
		http.NotFound(w, r)
	}
}

// A transfer whose every copy gave up may never have run: its key is not
// known to be used, and the same key with another amount would be a first
// request, rightly accepted. The client sends no amount change then, so
// the audit never counts such an acceptance as a wrong one.
func TestNoAmountChangeAfterNoAnswer(t *testing.T) {
	srv := &refusingServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := DefaultConfig()
	c.URL = ts.URL
	c.APIKeys = "k=acme"
	c.Seed = 5 // plans amount changes among its first 48 transfers
	c.Accounts = 2
	c.Transfers = 48
	c.Concurrency = 4
	c.Timeout = 5 * time.Second
	c.Attempts = 1
	c.Duration = time.Minute
	p := newPlan(c.Seed, 1, c.Accounts, c.Transfers)
	planned := 0
	for _, tr := range p.transfers {
		if tr.change {
			planned++
		}
	}
	if planned == 0 {
		t.Fatalf("the plan of seed %d has no amount change; the test proves nothing", c.Seed)
	}
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.GaveUp == 0 {
		t.Fatalf("no client gave up; the server should have refused every transfer")
	}
	if n := srv.changed.Load(); n != 0 || rep.AmountChanges != 0 {
		t.Errorf("%d amount changes sent (%d reported) under keys that were never answered, want 0", n, rep.AmountChanges)
	}
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[int]time.Duration{50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond} {
		if got := percentile(slices.Clone(ds), p); got != want {
			t.Errorf("percentile %d of 1..100 ms = %v, want %v", p, got, want)
		}
	}
	if got := percentile([]time.Duration{7 * time.Second}, 99); got != 7*time.Second {
		t.Errorf("percentile 99 of one = %v, want it", got)
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("percentile of none = %v, want 0", got)
	}
}
