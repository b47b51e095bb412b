package idemshed

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/problem"
)

// readAhead reads r's body, up to one byte past MaxBodyBytes, within
// BodyTimeout and before r takes a slot, and hands the handler those bytes
// followed by whatever is left, so that a body past the limit is still
// refused where it would be without the Shedder. A body past
// SmallBodyBytes is read only within what is left of ReadAheadBytes, and
// unread returns its bytes once the request is done. When ok is false the
// request has been answered: its body did not arrive in time, the client
// left while sending it, or there was no room for it.
//
// The bound is the connection's read deadline (http.ResponseController),
// which ends a read that is waiting for bytes; a ResponseWriter that cannot
// set one (a test recorder) reads without it.
func (s *Shedder) readAhead(w http.ResponseWriter, r *http.Request) (unread func(), ok bool) {
	unread = func() {}
	if s.cfg.BodyTimeout < 0 || r.Body == nil || r.Body == http.NoBody {
		return unread, true
	}
	rc := http.NewResponseController(w)
	bounded := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) == nil
	limit := s.cfg.MaxBodyBytes + 1
	head, err := io.ReadAll(io.LimitReader(r.Body, min(limit, SmallBodyBytes+1)))
	if err == nil && int64(len(head)) > SmallBodyBytes {
		// Room for the rest, as long as it says it is or the limit.
		want := limit
		if r.ContentLength >= 0 {
			want = min(want, r.ContentLength)
		}
		want -= int64(len(head))
		if !s.bodies.take(want) {
			s.refused[ReadAheadFull].Add(1)
			// The rest of the body is not read: the connection goes.
			w.Header().Set("Connection", "close")
			s.refuse(w)
			return unread, false
		}
		var rest []byte
		rest, err = io.ReadAll(io.LimitReader(r.Body, limit-int64(len(head))))
		head = append(head, rest...)
		held := int64(len(rest))
		s.bodies.give(want - held)
		unread = func() { s.bodies.give(held) }
	}
	if err != nil {
		// The deadline stays, and the connection is closed after the
		// answer: net/http would otherwise read the rest of the body,
		// as slowly as it comes, before it sends the answer.
		w.Header().Set("Connection", "close")
		s.refused[SlowBody].Add(1)
		s.writeProblem(w, problem.BodyUnread)
		return unread, false
	}
	if bounded {
		// Cleared, not left to expire while the handler runs: net/http
		// reads the idle connection in the background once the body has
		// ended, and a deadline met there would end the request's context
		// as if its client had left.
		_ = rc.SetReadDeadline(time.Time{})
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	return unread, true
}

// budget is a count of bytes shared by the requests that read ahead.
type budget struct {
	left atomic.Int64
}

// take takes n bytes, if that many are left.
func (b *budget) take(n int64) bool {
	for {
		left := b.left.Load()
		if left < n {
			return false
		}
		if b.left.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// give returns n bytes.
func (b *budget) give(n int64) {
	b.left.Add(n)
}

// timesAtMost is a*b, or math.MaxInt64 when that is more.
func timesAtMost(a, b int64) int64 {
	if a > 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
