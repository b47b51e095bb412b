package idemshed_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemshed"
)

// Clients that send their bodies a byte at a time hold no slot: with every
// slot's worth of them connected, other small requests are served, and the
// slow ones are answered 400 once their bodies have taken BodyTimeout,
// without reaching the handler.
func TestSlowBodiesHoldNoSlot(t *testing.T) {
	s, err := idemshed.New(idemshed.Config{MaxInFlight: 4, BodyTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	srv := httptest.NewServer(s.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("handler: body: %v", err)
		}
		served.Add(1)
		time.Sleep(5 * time.Millisecond)
	})))
	defer srv.Close()

	slow := make(chan slowAnswer, 4)
	for range 4 {
		go func() { slow <- slowPost(t, srv.Listener.Addr().String()) }()
	}
	time.Sleep(100 * time.Millisecond) // the slow clients are sending
	for i := range 20 {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("small request %d: %d while slow bodies were arriving, want 200", i, resp.StatusCode)
		}
	}
	for range 4 {
		a := <-slow
		if !strings.HasPrefix(a.status, "HTTP/1.1 400") || a.sentAll {
			t.Errorf("slow body: %q after sending all of it: %v; want 400 before the body was done", a.status, a.sentAll)
		}
	}
	if n := served.Load(); n != 20 {
		t.Errorf("%d requests reached the handler, want the 20 small ones", n)
	}
	if st := s.Stats(); st.Refused[idemshed.SlowBody] != 4 {
		t.Errorf("stats: %+v, want 4 refused as slow-body", st)
	}
}

// slowAnswer is the status line a slow client got, and whether it had sent
// its whole body by then.
type slowAnswer struct {
	status  string
	sentAll bool
}

// slowPost sends a POST whose 100-byte body comes a byte every 50 ms, and
// returns the answer's status line.
func slowPost(t *testing.T, addr string) slowAnswer {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return slowAnswer{}
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Error(err)
		return slowAnswer{}
	}
	done := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(conn).ReadString('\n')
		done <- strings.TrimSpace(line)
	}()
	for range 100 {
		select {
		case line := <-done:
			return slowAnswer{status: line}
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := conn.Write([]byte{' '}); err != nil {
			break
		}
	}
	return slowAnswer{status: <-done, sentAll: true}
}

// The bodies read ahead hold at most ReadAheadBytes, however many clients
// send one: with one slot and no queue, 48 clients that each send a MiB
// and withhold its last bytes add about one MiB to the heap, the ones
// past the budget are refused at once, and small requests are served
// meanwhile.
func TestReadAheadBoundedInAll(t *testing.T) {
	const conns = 48
	s, err := idemshed.New(idemshed.Config{MaxInFlight: 1, BodyTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	chunk := strings.Repeat("x", 1<<20)
	for range conns {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Content-Length one MiB and ten bytes; the last ten never come.
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(chunk)+10)
		_, _ = io.WriteString(c, chunk) // a refused client's write may fail
	}
	time.Sleep(time.Second)
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	for i := range 10 {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("small request %d: %d while the large bodies were held, want 200", i, resp.StatusCode)
		}
	}
	grew := int64(during.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use grew by %.1f MiB with %d connections", float64(grew)/(1<<20), conns)
	if grew > 8<<20 {
		t.Errorf("%d MiB of heap held by %d clients, with one slot and no queue", grew>>20, conns)
	}
	if n := s.Stats().Refused[idemshed.ReadAheadFull]; n != conns-1 {
		t.Errorf("%d refused as read-ahead-full, want %d", n, conns-1)
	}
}
