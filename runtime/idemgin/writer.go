package idemgin

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// writer is the gin.ResponseWriter a route's handlers write to inside the
// engine: it writes to the engine's http.ResponseWriter, which captures
// the response, with gin's own rules. A status is only recorded until the
// first byte of the body or WriteHeaderNow, so that a handler may change
// it, as gin's writer allows.
type writer struct {
	http.ResponseWriter
	status int
	size   int // -1 until the header is written
	// set: a handler chose the status (WriteHeader, c.Status).
	set     bool
	written bool
}

// answered reports whether the handlers gave an answer: chose a status or
// wrote a byte. gin would send its default 200 for a chain that did
// neither; inside the engine that is no answer (docs/semantics.md §3.4).
func (w *writer) answered() bool { return w.set || w.written }

var _ gin.ResponseWriter = (*writer)(nil)

func (w *writer) WriteHeader(code int) {
	if code > 0 && !w.written {
		w.status, w.set = code, true
	}
}

func (w *writer) WriteHeaderNow() {
	if !w.written {
		w.written = true
		w.ResponseWriter.WriteHeader(w.status)
	}
}

func (w *writer) Write(b []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	return n, err
}

func (w *writer) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := io.WriteString(w.ResponseWriter, s)
	w.size += n
	return n, err
}

func (w *writer) Status() int { return w.status }

func (w *writer) Size() int {
	if !w.written {
		return -1
	}
	return w.size
}

func (w *writer) Written() bool { return w.written }

func (w *writer) Flush() {
	w.WriteHeaderNow()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack is refused: a protected request's response is the engine's to
// store and replay, and a hijacked connection has none.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("idemgin: a protected request's connection cannot be hijacked")
}

// CloseNotify is gin's; it never fires here (use the request's context).
func (w *writer) CloseNotify() <-chan bool { return make(chan bool) }

// Pusher is nil: no server push for a response the engine stores.
func (w *writer) Pusher() http.Pusher { return nil }
