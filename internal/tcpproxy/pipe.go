package tcpproxy

import (
	"net"
	"time"
)

// chunk is what one read returned, and when it may be written on.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst until either side ends, then closes both. One
// goroutine reads and stamps each chunk with the time it is due, another
// writes it when that time has come, so chunks in flight overlap as on a
// network: the delay adds latency, not a limit on throughput.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	chunks := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.deliver(dst, chunks)
		// A failed write leaves chunks unread: closing src ends the
		// reader below, which may wait to send one.
		_ = src.Close()
		for range chunks {
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay := p.delay
			p.mu.Unlock()
			chunks <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
		}
		if err != nil {
			break
		}
	}
	close(chunks)
	<-done
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
	_ = src.Close()
	_ = dst.Close()
}

// deliver writes each chunk to dst once it is due and no stall holds it,
// until chunks is closed or a write fails.
func (p *Proxy) deliver(dst net.Conn, chunks <-chan chunk) {
	w := newWaiter()
	defer w.close()
	for c := range chunks {
		p.holdWhileStalled()
		w.until(c.due)
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// holdWhileStalled returns once no stall holds the bytes.
func (p *Proxy) holdWhileStalled() {
	for {
		p.mu.Lock()
		stall := p.stall
		p.mu.Unlock()
		if !stall {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
