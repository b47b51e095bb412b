package idemshed_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemshed"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// In front of an engine with DuplicateWait, one client's slow request and
// a stream of copies of it hold neither every slot nor the queue: the
// copies past DuplicateWaiters are answered 409 at once, none counts as a
// retry, and every honest client's retry is served.
func TestCopiesOfOneRequestHoldNoSlots(t *testing.T) {
	release := make(chan struct{})
	e, err := idem.New(idem.Config{
		Store:         memstore.New(),
		Policies:      []idem.Policy{idemtest.Policy("createTransfer", "/transfers")},
		Tenant:        idem.SingleTenant("t"),
		DuplicateWait: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := idemshed.New(idemshed.Config{MaxInFlight: 3, MaxQueue: 2, MaxWait: 2 * time.Second, CongestedWait: 2 * time.Second,
		Key: idemshed.HeaderKey("Idempotency-Key")})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Middleware(e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "slow" {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})))
	send := func(key string) int {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	var copies sync.WaitGroup
	copies.Go(func() { send("slow") })
	time.Sleep(50 * time.Millisecond)
	for range 10 {
		copies.Go(func() { send("slow") })
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	var refused atomic.Int64
	for attempt := range 2 {
		var honest sync.WaitGroup
		for i := range 6 {
			honest.Go(func() {
				if send("honest-"+strconv.Itoa(i)) == http.StatusServiceUnavailable && attempt == 1 {
					refused.Add(1)
				}
			})
			copies.Go(func() { send("slow") })
			time.Sleep(20 * time.Millisecond)
		}
		honest.Wait()
	}
	close(release)
	copies.Wait()
	if n := refused.Load(); n > 0 {
		t.Errorf("%d of 6 honest retries refused while one client's request and its copies waited (stats %+v)", n, s.Stats())
	}
}
