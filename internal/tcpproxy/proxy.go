// Package tcpproxy is a TCP proxy on loopback that tests and benchmarks put
// between a service and its store. It forwards every connection to one
// target and can hold the bytes as a network would: each chunk arrives a
// fixed delay after it was sent, in each direction, without limiting how
// many are on their way; it can also stall the bytes, refuse new
// connections and reset the open ones.
package tcpproxy

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Proxy forwards connections on a loopback port to its target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	delay  time.Duration
	stall  bool
	refuse bool
	wg     sync.WaitGroup
}

// New listens on a free loopback port and forwards to target until the
// test or benchmark ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the host:port to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay makes every chunk read from now on arrive d after it was read,
// in both directions: a round trip through the proxy takes 2d more.
func (p *Proxy) SetDelay(d time.Duration) { p.set(func() { p.delay = d }) }

// SetStall holds every chunk, in both directions, until it is called with
// false.
func (p *Proxy) SetStall(stall bool) { p.set(func() { p.stall = stall }) }

// SetRefuse makes the proxy reset every new connection as soon as it is
// accepted, until it is called with false.
func (p *Proxy) SetRefuse(refuse bool) { p.set(func() { p.refuse = refuse }) }

// ResetAll ends every open connection with a TCP reset.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		reset(c)
	}
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			reset(c)
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.set(func() { p.stall, p.delay = false, 0 })
	p.ResetAll()
	p.wg.Wait()
}

// reset closes c with a TCP RST rather than a FIN, as a crashed peer or a
// middlebox would.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// NewForURL starts a proxy to the host of rawURL (on defaultPort when the
// URL names none) and returns it with a copy of the URL that reaches the
// host through it.
func NewForURL(t testing.TB, rawURL, defaultPort string) (*Proxy, *url.URL) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), defaultPort)
	}
	p := New(t, host)
	u.Host = p.Addr()
	return p, u
}
