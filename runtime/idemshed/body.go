package idemshed

import (
	"bytes"
	"io"
	"net/http"
	"time"
)

// readAhead reads r's body, up to one byte past MaxBodyBytes, within
// BodyTimeout and before r takes a slot, and hands the handler those bytes
// followed by whatever is left, so that a body past the limit is still
// refused where it would be without the Shedder. It reports false when the
// body did not arrive in time, or the client left while sending it.
//
// The bound is the connection's read deadline (http.ResponseController),
// which ends a read that is waiting for bytes; a ResponseWriter that cannot
// set one (a test recorder) reads without it.
func (s *Shedder) readAhead(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.BodyTimeout < 0 || r.Body == nil || r.Body == http.NoBody {
		return true
	}
	rc := http.NewResponseController(w)
	bounded := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) == nil
	head, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
	if err != nil {
		// The deadline stays, and the connection is closed after the
		// answer: net/http would otherwise read the rest of the body,
		// as slowly as it comes, before it sends the answer.
		w.Header().Set("Connection", "close")
		return false
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
	return true
}
