package idemshed

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// request is a request under key from tenant (the X-Tenant header), by
// method to path, its client already gone when gone is set.
func request(tenant, method, path, key string, gone bool) *http.Request {
	ctx := context.Background()
	if gone {
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	r := httptest.NewRequestWithContext(ctx, method, path, nil)
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("X-Tenant", tenant)
	return r
}

// headerTenant is a Config.Tenant that reads X-Tenant.
func headerTenant(r *http.Request) (string, bool) {
	t := r.Header.Get("X-Tenant")
	return t, t != ""
}

// isRetry reports whether s takes r for a retry.
func isRetry(s *Shedder, r *http.Request) bool {
	return s.newWaiter(r).retry
}

// A client that keeps its keys in use, each served every 50 s for an
// hour, and then sends a new request under one, gains nothing by it: the
// retry of an honest client refused 30 s before is served first and
// never displaced, 5 times of 5.
func TestServedRequestsGainNoAge(t *testing.T) {
	s, move := keyed(t, 1)
	served := s.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for range 72 {
		for i := range 5 {
			serveKey(served, "keep", "evil"+strconv.Itoa(i))
		}
		move(50 * time.Second)
	}
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serveKey(h, "busy", "busy") })
	<-b.entered
	for i := range 5 {
		n := strconv.Itoa(i)
		refusedAgo(t, s, "honest"+n, move, 30*time.Second)
		honest := make(chan int, 1)
		wg.Go(func() { honest <- serveKey(h, "honest"+n, "honest"+n).Code })
		waitQueued(t, s, 1)
		refused := func() int64 { st := s.Stats(); return st.Refused[Full] + st.Refused[Displaced] }
		before := refused()
		wg.Go(func() { serveKey(h, "evil"+n, "evil"+n) })
		for j := 0; j < 5000 && refused() == before; j++ {
			time.Sleep(time.Millisecond)
		}
		b.release <- struct{}{} // busy ends
		if got := <-b.entered; got != "honest"+n {
			t.Fatalf("round %d: the freed slot went to %s, want the honest retry (stats %+v)", i, got, s.Stats())
		}
		wg.Go(func() { serveKey(h, "busy", "busy") })
		waitQueued(t, s, 1)
		b.release <- struct{}{} // the honest retry ends
		if code := <-honest; code != http.StatusCreated {
			t.Fatalf("round %d: the honest retry: %d", i, code)
		}
		<-b.entered
	}
	close(b.release)
	wg.Wait()
}

// A retry repeats its request's tenant, method, path and key: the same
// key with another of them is a first attempt.
func TestRetryIsOfOneTenantMethodAndPath(t *testing.T) {
	s := mustNew(t, Config{MaxInFlight: 1, Key: HeaderKey("Idempotency-Key"), Tenant: headerTenant})
	s.remember(s.newWaiter(request("acme", "POST", "/payments", "k", false)), Full)
	if !isRetry(s, request("acme", "POST", "/payments", "k", false)) {
		t.Fatal("the same request again is no retry")
	}
	for _, r := range []*http.Request{
		request("evil", "POST", "/payments", "k", false),
		request("acme", "GET", "/payments", "k", false),
		request("acme", "POST", "/report", "k", false),
		request("", "POST", "/payments", "k", false),
	} {
		if isRetry(s, r) {
			t.Errorf("%s %s of tenant %q is a retry of acme's POST /payments", r.Method, r.URL.Path, r.Header.Get("X-Tenant"))
		}
	}
}

// A client that floods the Shedder with refused requests under fresh keys
// makes it forget no request refused before; with Config.Tenant it holds
// at most its share, and other tenants' new refusals are still
// remembered.
func TestKeyFloodKeepsOthersRetries(t *testing.T) {
	for _, tenants := range []bool{false, true} {
		cfg := Config{MaxInFlight: 1, Key: HeaderKey("Idempotency-Key"), MaxKeys: 1 << 10}
		if tenants {
			cfg.Tenant = headerTenant
		}
		s := mustNew(t, cfg)
		b := newBlocking()
		h := s.Middleware(b)
		var wg sync.WaitGroup
		wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), request("acme", "GET", "/busy", "busy", false)) })
		<-b.entered // the one slot is taken: every request below is refused Full
		h.ServeHTTP(httptest.NewRecorder(), request("acme", "POST", "/payments", "honest", false))
		for i := range 4 << 10 {
			h.ServeHTTP(httptest.NewRecorder(), request("evil", "POST", "/payments", "flood-"+strconv.Itoa(i), false))
		}
		if n := s.refusals.len(); n > 1<<10 {
			t.Errorf("tenants %v: %d requests remembered, want at most 1024", tenants, n)
		}
		if !isRetry(s, request("acme", "POST", "/payments", "honest", false)) {
			t.Errorf("tenants %v: after 4096 refusals of fresh keys, the honest retry counts as a first attempt", tenants)
		}
		h.ServeHTTP(httptest.NewRecorder(), request("acme", "POST", "/payments", "later", false))
		if got := isRetry(s, request("acme", "POST", "/payments", "later", false)); got != tenants {
			t.Errorf("tenants %v: a request refused after the flood is remembered: %v", tenants, got)
		}
		close(b.release)
		wg.Wait()
	}
}

// While a request's attempt is served, its copies are first attempts, and
// their refusals are not remembered; once served, the request is
// forgotten.
func TestServedRequestCopiesAreNoRetries(t *testing.T) {
	s, move := keyed(t, 1)
	refusedAgo(t, s, "k", move, 30*time.Second)
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serveKey(h, "retry", "k") })
	<-b.entered
	if isRetry(s, request("", "POST", "/t", "k", false)) {
		t.Error("a copy of the request being served is a retry")
	}
	h.ServeHTTP(httptest.NewRecorder(), request("", "POST", "/t", "k", true))
	close(b.release)
	wg.Wait()
	if isRetry(s, request("", "POST", "/t", "k", false)) {
		t.Error("the request served, or its copy refused while it was, is remembered")
	}
}

// The memory takes no requests past MaxKeys, keeps each request for
// KeyMemory after its first refusal however often it is refused again, and
// forgets one not refused again for twice KeyMemory.
func TestRefusalsBounded(t *testing.T) {
	t0 := time.Now()
	f := newRefusals(8, 8, time.Minute, t0)
	f.refused(1, "", t0, t0)
	for i := range uint64(100) {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		f.refused(i+2, "", now, now)
		if at, again := f.look(1, now); !again || !at.Equal(t0) {
			t.Fatalf("after %d refusals: the first refused at %v (again %v), want %v", i, at, again, t0)
		}
		if n := f.len(); n > 8 {
			t.Fatalf("after %d refusals: %d remembered, want at most 8", i, n)
		}
	}
	later := t0.Add(time.Minute + time.Second)
	f.refused(1, "", t0, later)
	if at, again := f.look(1, later); again {
		t.Errorf("refused again and again since %v, still remembered at %v", at, later)
	}
	f.refused(1, "", later, later)
	if _, again := f.look(2, later.Add(2*time.Minute)); again {
		t.Error("a request not refused for two spans is remembered")
	}
}
