package idem

import (
	"bytes"
	"errors"
	"net/http"
	"sync"
)

// recorder captures a handler's response so that it can be stored before the
// client sees it. A response is held back until the engine has decided what
// to do with it: stored, released or discarded. Only a body that outgrows
// the snapshot limit is streamed on (non-transactional operations only),
// because it will never be replayed anyway.
//
// Once the handler has returned, the recorder is ended: what is written to
// it after that is dropped. A handler that outlives its request (a
// goroutine it started, or middleware in front that returned while it
// still ran) may still hold the recorder, or a router's context object
// that leads to it; its late writes must not change the answer the engine
// is storing, nor reach the writer under it, which a router may already
// have handed to another request (docs/semantics.md §3.4).
type recorder struct {
	// mu orders the handler's writes, from whatever goroutine, with end.
	mu     sync.Mutex
	ended  bool
	w      http.ResponseWriter
	header http.Header
	status int
	body   bytes.Buffer
	// limit is the largest body kept; -1 buffers everything (transactional
	// operations must not send a byte before their commit).
	limit int64
	// overflowed is set once the body exceeded limit.
	overflowed bool
	// streaming is set once the response went to the client directly.
	streaming bool
}

// newRecorder readies q's recorder for w: it lives in the request, which is
// allocated anyway, and a request runs its handler once.
func newRecorder(q *request, w http.ResponseWriter, limit int64) *recorder {
	q.rec = recorder{w: w, header: make(http.Header), limit: limit}
	return &q.rec
}

// errEnded is what a write to an ended recorder returns.
var errEnded = errors.New("idem: the request's handler has returned; what is written after is dropped")

// end drops everything written from now on. The engine calls it once the
// handler returned, before it reads what was captured.
func (r *recorder) end() {
	r.mu.Lock()
	r.ended = true
	r.mu.Unlock()
}

func (r *recorder) Header() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return http.Header{} // a late handler's headers go nowhere
	}
	if r.streaming {
		return r.w.Header()
	}
	return r.header
}

func (r *recorder) WriteHeader(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeHeader(status)
}

func (r *recorder) writeHeader(status int) {
	if r.ended || r.status != 0 || status < 200 {
		// Informational responses (1xx) are not captured, like the
		// second call of WriteHeader they do not change the final status.
		return
	}
	r.status = status
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return 0, errEnded
	}
	if r.status == 0 {
		r.writeHeader(http.StatusOK)
	}
	if !bodyAllowed(r.status) {
		// net/http refuses these bytes, and the first client never sees
		// them; kept, they would make a replay declare a body a 204 or
		// a 304 may not have.
		return 0, http.ErrBodyNotAllowed
	}
	if r.streaming {
		return r.w.Write(p)
	}
	if r.limit >= 0 && int64(r.body.Len()+len(p)) > r.limit {
		r.overflowed = true
		r.startStreaming()
		return r.w.Write(p)
	}
	return r.body.Write(p)
}

// startStreaming sends what was captured and lets the rest pass through.
func (r *recorder) startStreaming() {
	r.streaming = true
	copyHeader(r.w.Header(), r.header)
	r.w.WriteHeader(r.status)
	_, _ = r.w.Write(r.body.Bytes())
	r.body = bytes.Buffer{}
}

// Flush keeps the response buffered: a protected operation's response is
// stored whole before it is sent. It exists so that handlers that call
// http.Flusher do not fail.
func (r *recorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streaming && !r.ended {
		_ = http.NewResponseController(r.w).Flush()
	}
}

// answered reports whether the handler wrote a status or a byte.
func (r *recorder) answered() bool { return r.status != 0 }

func (r *recorder) statusCode() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// send writes the captured response to the client, unless it already went.
func (r *recorder) send() {
	if r.streaming {
		return
	}
	copyHeader(r.w.Header(), r.header)
	r.w.WriteHeader(r.statusCode())
	_, _ = r.w.Write(r.body.Bytes())
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}
