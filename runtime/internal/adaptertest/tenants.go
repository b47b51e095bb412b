package adaptertest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TenantEngine serves a non-transactional Op on a memory store, for the
// tenant a request names in its X-Tenant header.
func TenantEngine(t *testing.T) *idem.Engine {
	t.Helper()
	engine, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{idemtest.Policy(Op, "/transfers")},
		Tenant:   func(r *http.Request) (string, bool) { return r.Header.Get("X-Tenant"), true },
	})
	if err != nil {
		t.Fatal(err)
	}
	return engine
}

// TenantPost sends one protected POST /transfers to srv for tenant under
// key, and returns its status and body.
func TenantPost(t *testing.T, srv *httptest.Server, tenant, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Tenant", tenant)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// RefusedWithAnothersContext sends tenant b's requests to srv, each under
// a key of its own, while tenant a's handler still runs with the request
// context a router pools; after each, returned waits until its chain has
// returned. A request served with a context of its own is answered 201;
// the first that is not must be the adapter's 500 (a context still in
// use), and no answer may hold tenant a's secret ("a-secret"). It skips t
// when the router's pool handed tenant a's context to none of 200.
func RefusedWithAnothersContext(t *testing.T, srv *httptest.Server, returned func()) {
	t.Helper()
	for i := range 200 {
		status, body := TenantPost(t, srv, "b", "b-"+strconv.Itoa(i))
		returned()
		if strings.Contains(body, "a-secret") {
			t.Fatalf("tenant b got tenant a's answer: %d %s", status, body)
		}
		if status == http.StatusCreated {
			continue // served with a context of its own
		}
		if status != http.StatusInternalServerError || !strings.Contains(body, "still runs") {
			t.Fatalf("tenant b, served with tenant a's context: %d %s, want 500", status, body)
		}
		return
	}
	t.Skip("the router's pool did not hand tenant a's context to another request")
}

// AnswersStayApart sends srv, whose handler answers a tenant's request
// with a body holding "4242-<tenant>-", one request of tenant late, whose
// handler answers past its deadline, while four keys of tenant other are
// sent twice each. Each tenant gets its own answers, and late's retry
// replays late's answer.
func AnswersStayApart(t *testing.T, srv *httptest.Server, late, other string) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := other + "-" + strconv.Itoa(i)
			for range 2 {
				if status, body := TenantPost(t, srv, other, key); status != http.StatusCreated || !strings.Contains(body, "4242-"+other+"-") {
					t.Errorf("%s: %d %s, want its own answer", other, status, body)
				}
			}
		}()
	}
	status, body := TenantPost(t, srv, late, late+"-1")
	wg.Wait()
	if status != http.StatusCreated || !strings.Contains(body, "4242-"+late+"-") {
		t.Fatalf("%s: %d %s, want its own late answer", late, status, body)
	}
	if rs, rb := TenantPost(t, srv, late, late+"-1"); rs != status || rb != body {
		t.Fatalf("%s's replay: %d %s, want %d %s", late, rs, rb, status, body)
	}
}
