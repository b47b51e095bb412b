package redisstore_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// cutter is a dialer whose connections a test can cut, and whose new
// connections it can refuse, as a network partition between the app and
// Redis would. It serves a single client and a cluster client alike.
type cutter struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	down := c.down
	c.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		_ = conn.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c.conns = append(c.conns, conn)
	return conn, nil
}

// cut closes every connection and refuses new ones until restore.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

func (c *cutter) restore() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = false
}

// Proof: Redis goes away while requests flow through the engine. Claims
// that cannot reach it answer 503 idempotency-store-unavailable with
// Retry-After and never run the handler; once Redis is reachable again the
// same engine and client serve again. A completion lost after the handler
// ran leaves the client with the handler's answer and the key in flight: a
// retry meets 409 request-in-progress while the lease runs, and,
// fail-closed, 409 outcome-unknown after it.
func TestEngineStoreOutage(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		net := &cutter{}
		// The client fails fast, as runtime.md advises: go-redis's
		// defaults (5 dial attempts, 3 retries of a command) make a request
		// wait over 3s for its 503.
		c := b.open(t, func(o *redis.UniversalOptions) {
			o.Dialer = net.dial
			o.DialerRetries = 1
			o.MaxRetries = 1
		})
		s := storeOn(t, c)

		const lease = 2 * time.Second
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Cut-Redis") == "1" {
				// Redis goes away after the claim and before the completion.
				net.cut()
			}
			enginetest.Created(w, r.Header.Get("Idempotency-Key"))
		})
		es := enginetest.ServeEngine(t, s, handler,
			enginetest.EnginePolicy("createTransfer", "/transfers", lease, idemstore.FailClosed, false))
		const body = `{"amount":100,"to":"acc_1"}`
		unavailable := 0 // 503s the clients saw

		before := es.MustPost(t, "/transfers", "before", body)
		if before.Status != http.StatusCreated || before.Replayed() {
			t.Fatalf("before the outage: %v", before)
		}

		// During the outage: new keys and a replay alike are refused
		// promptly, and nothing runs.
		net.cut()
		for _, key := range []string{"during-1", "during-2", "during-3", "before"} {
			start := time.Now()
			a := es.MustPost(t, "/transfers", key, body)
			if err := enginetest.CheckProblem(a, http.StatusServiceUnavailable, problem.StoreUnavailable, true); err != nil {
				t.Errorf("%s during the outage: %v", key, err)
			}
			unavailable++
			d := time.Since(start)
			t.Logf("%s during the outage answered %d after %v", key, a.Status, d.Round(time.Millisecond))
			if d > 3*time.Second {
				t.Errorf("%s during the outage answered after %v, want a prompt 503", key, d)
			}
		}
		for _, key := range []string{"during-1", "during-2", "during-3"} {
			if n := es.RunsOf(key); n != 0 {
				t.Errorf("%s: handler ran %d times during the outage, want 0", key, n)
			}
		}

		// Redis is reachable again: the same engine serves, once the client
		// has dialled anew (in a cluster, each key's node on its own, so
		// every key may meet 503s a little longer; none of them runs).
		net.restore()
		deadline := time.Now().Add(10 * time.Second)
		for _, key := range []string{"during-1", "during-2", "during-3"} {
			for {
				a := es.MustPost(t, "/transfers", key, body)
				if a.Status == http.StatusCreated && !a.Replayed() {
					break
				}
				if err := enginetest.CheckProblem(a, http.StatusServiceUnavailable, problem.StoreUnavailable, true); err != nil {
					t.Fatalf("%s after the outage: %v, want a fresh 201 (or 503 while reconnecting)", key, err)
				}
				unavailable++
				if time.Now().After(deadline) {
					t.Fatalf("%s: still %v 10s after Redis came back", key, a)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if err := enginetest.CheckReplay(es.MustPost(t, "/transfers", "before", body), before); err != nil {
			t.Errorf("replay of a key stored before the outage: %v", err)
		}
		for _, key := range []string{"before", "during-1", "during-2", "during-3"} {
			if n := es.RunsOf(key); n != 1 {
				t.Errorf("%s: handler ran %d times, want 1", key, n)
			}
		}

		// The completion fails after the handler ran: the client still gets
		// the handler's answer.
		claimed := time.Now()
		lost := es.MustPost(t, "/transfers", "lost", body, "X-Cut-Redis", "1")
		if lost.Status != http.StatusCreated || lost.Replayed() {
			t.Fatalf("request whose completion failed: %v, want the handler's own 201", lost)
		}
		net.restore()
		enginetest.LostCompletion(t, es, "lost", body, claimed, lease, unavailable)
	})
}
