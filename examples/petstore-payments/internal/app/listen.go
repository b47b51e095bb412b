package app

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxHeaderBytes bounds a request's header block. Go's default is 1 MiB;
// this API's headers are a bearer key, an Idempotency-Key and a few
// standard ones, so 64 KiB leaves room for any proxy's additions while a
// client cannot make the server hold a megabyte per connection.
const maxHeaderBytes = 64 << 10

// readHeaderTimeout bounds the header block alone; the whole request,
// body included, is bounded by --read-timeout.
const readHeaderTimeout = 10 * time.Second

// httpServer is the http.Server with the limits of o. Every slow or idle
// client is eventually cut off: ReadTimeout ends a body dribbled byte by
// byte, WriteTimeout a client that stops reading its answer, IdleTimeout a
// keep-alive connection that sends nothing more.
func httpServer(o options, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(readHeaderTimeout, o.readTimeout),
		ReadTimeout:       o.readTimeout,
		// The write deadline starts when the request's header has been
		// read, so it covers reading the body, the handler and the answer.
		// The chaos pause is added so that the experiment's own delay never
		// costs a client its answer.
		WriteTimeout:   o.writeTimeout + o.chaosDelay,
		IdleTimeout:    o.idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// limitListener accepts at most cap(slots) connections at a time. When all
// slots are taken it stops accepting, so a further client waits in the
// kernel's accept queue (its connect succeeds, its request is not read)
// until a connection closes; the timeouts above make sure one does.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

// Close stops accepting; an Accept waiting for a slot returns at once.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// slotConn gives its slot back when it is closed, once.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

// Close closes the connection and frees its slot.
func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
