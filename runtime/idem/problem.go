package idem

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/idemgen/idemgen/runtime/problem"
)

const (
	problemContentType         = "application/problem+json"
	headerRetryAfter           = "Retry-After"
	storeUnavailableRetryAfter = 2
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	// Type is the full type URI.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header in
	// whole seconds. It is not part of the JSON body.
	RetryAfter int `json:"-"`
}

// Write sends p as application/problem+json.
func (p Problem) Write(w http.ResponseWriter) {
	body, err := json.Marshal(p)
	if err != nil {
		// A Problem holds only strings and ints; Marshal cannot fail.
		panic(err)
	}
	h := w.Header()
	h.Set("Content-Type", problemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	if p.RetryAfter > 0 {
		h.Set(headerRetryAfter, strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// answer is the Problem of answer a, its detail's verbs filled with args,
// under the engine's ProblemBase.
func (e *Engine) answer(a problem.Answer, args ...any) Problem {
	return answerUnder(e.problemBase, a, args...)
}

// answerUnder is the Problem of answer a under base. An answer that
// carries Retry-After (problem.Answer.RetryAfter) says 1 second unless its
// caller knows better.
func answerUnder(base string, a problem.Answer, args ...any) Problem {
	p := Problem{Type: base + a.Name(), Title: a.Title(), Status: a.Status(), Detail: a.Detail(args...)}
	if a.RetryAfter() {
		p.RetryAfter = 1
	}
	return p
}

// reject answers a request refused before any claim (admission, or a
// route the engine cannot apply its policy to).
func (e *Engine) reject(w http.ResponseWriter, q *request, p Problem) {
	q.event.Outcome, q.event.Status = OutcomeRejected, p.Status
	p.Write(w)
}

// send answers with p, a problem met after admission.
func (e *Engine) send(w http.ResponseWriter, q *request, p Problem) {
	q.event.Status = p.Status
	p.Write(w)
}
