package lincheck

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A request whose reused connection breaks before the answer is not sent
// again by net/http on the client's behalf: the service that received it
// may have executed it, and a second sending would be answered with the
// replay of the client's own execution, which the record would take for
// another request's.
func TestSendMakesEachRequestOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := r.Header.Get(requestHeader)
		mu.Lock()
		seen[req]++
		mu.Unlock()
		if req == "dies" {
			// The service killed after it took the request: the
			// connection breaks with no byte of an answer.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	start := time.Now()
	since := func() int64 { return time.Since(start).Nanoseconds() }
	first := &op{Req: "lives", Key: "k1", Body: `{"amount":1}`}
	send(hc, srv.URL, first, since, nil)
	if first.Status != http.StatusCreated {
		t.Fatalf("the first request: %d %s", first.Status, first.Err)
	}
	o := &op{Req: "dies", Key: "k2", Body: `{"amount":2}`}
	send(hc, srv.URL, o, since, nil) // on the first's connection, reused
	mu.Lock()
	defer mu.Unlock()
	if seen["dies"] != 1 || o.Err == "" {
		t.Errorf("the service received the request %d times and the client recorded %d %q; want once, and no answer", seen["dies"], o.Status, o.Err)
	}
}
