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

// httpServer is the http.Server with the limits of o, its write timeout
// grown by the lab's pause. Every slow or idle
// client is eventually cut off: ReadTimeout ends a body dribbled byte by
// byte, WriteTimeout a client that stops reading its answer, IdleTimeout a
// keep-alive connection that sends nothing more.
func httpServer(o *Options, pause time.Duration, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(readHeaderTimeout, o.readTimeout),
		ReadTimeout:       o.readTimeout,
		// The write deadline starts when the request's header has been
		// read, so it covers reading the body, the handler and the answer.
		// The lab's pause is added so that the experiment's own delay
		// never costs a client its answer.
		WriteTimeout:   o.writeTimeout + pause,
		IdleTimeout:    o.idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// limitListener keeps at most cap(slots) connections open. A connection
// beyond them is closed as soon as it is accepted: its client learns at
// once that it must come back, instead of waiting unread in the kernel's
// accept queue while its deadline runs out. The bound is on memory (each
// connection costs buffers and a goroutine), not on work: the requests
// served at once are bounded by admission, so idle keep-alive
// connections hold none of that capacity.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n)}
}

// Accept returns the next connection for which a slot is free, and closes
// those that come while every slot is taken.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
			_ = c.Close()
		}
	}
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
