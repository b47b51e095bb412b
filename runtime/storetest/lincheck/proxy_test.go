package lincheck

import (
	"net"
	"sync"
	"testing"
	"time"
)

// proxy is a TCP proxy on loopback between the service and its store,
// through which the test breaks the connection: it resets every open
// connection, refuses new ones, stalls the bytes in both directions, or
// delays each read.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	delay  time.Duration
	stall  bool
	refuse bool
	wg     sync.WaitGroup
}

// newProxy listens on a free loopback port and forwards to target until
// the test ends.
func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
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

// pipe copies src to dst, holding each chunk as long as the fault says,
// and closes both when either side ends.
func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.hold()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold waits as the current fault says before a chunk moves on.
func (p *proxy) hold() {
	for {
		p.mu.Lock()
		stall, delay := p.stall, p.delay
		p.mu.Unlock()
		if !stall {
			time.Sleep(delay)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// resetAll ends every open connection with a TCP reset.
func (p *proxy) resetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		reset(c)
	}
}

func (p *proxy) set(f func(p *proxy)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.set(func(p *proxy) { p.stall, p.delay = false, 0 })
	p.resetAll()
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
