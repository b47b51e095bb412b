package idem

import (
	"fmt"
	"net/http"
	"strings"
)

func (e *Engine) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, params := e.router.find(r.Method, r.URL.EscapedPath())
		if op == nil {
			next.ServeHTTP(w, r)
			return
		}
		e.serve(w, r, op, params, next)
	})
}

// Handler protects next, the handler of one operation, for routers that
// mount per route. It panics when operationID has no policy: that is a
// wiring mistake to surface at start-up, not a request to serve.
func (e *Engine) Handler(operationID string, next http.Handler) http.Handler {
	op, ok := e.ops[operationID]
	if !ok {
		panic(fmt.Sprintf("idem: no policy for operation %q", operationID))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != op.Method {
			next.ServeHTTP(w, r)
			return
		}
		p, _ := strings.CutPrefix(r.URL.EscapedPath(), e.router.basePath)
		params, _ := op.template.match(strings.Split(strings.TrimPrefix(p, "/"), "/"))
		e.serve(w, r, op, params, next)
	})
}
