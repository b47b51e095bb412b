package idem

import (
	"fmt"
	"net/http"

	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// refusedRoute is a pattern ServeMux.Handle could not register. It is a
// handler only so that ServeMux.Handler can hand it to CheckRoutes; no
// request reaches it, since the mux never registered it.
type refusedRoute struct {
	method string
	tmpl   *pathtemplate.Template // nil when the path is no template either
	err    error
}

func (rr refusedRoute) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, rr.err.Error(), http.StatusInternalServerError)
}

// matches reports whether r is a request the refused pattern was meant
// for.
func (rr refusedRoute) matches(r *http.Request) bool {
	if rr.tmpl == nil || (rr.method != "" && rr.method != r.Method) {
		return false
	}
	path, _ := pathtemplate.RequestPath(r.URL)
	segs, ok := pathtemplate.Split(path)
	if !ok {
		return false
	}
	_, ok = rr.tmpl.Match(segs)
	return ok
}

// refuse records and logs a pattern the underlying mux cannot parse.
func (m *ServeMux) refuse(method, path, pattern string, cause error) {
	err := fmt.Errorf("idem: ServeMux: net/http's ServeMux cannot register %q: %w; serve the route through chi (runtime/idemchi) or gorilla/mux, or mount Engine.Middleware in front of the router that serves it", pattern, cause)
	tmpl, _ := pathtemplate.Parse(path)
	m.refused = append(m.refused, refusedRoute{method: method, tmpl: tmpl, err: err})
	m.e.log.Error("route not registered: net/http's ServeMux cannot parse its pattern", "pattern", pattern, "err", err)
}

// parseOnServeMux reports whether net/http's ServeMux can parse pattern,
// by registering it on a mux of its own, where no other pattern can
// conflict with it: what panics there is the pattern itself.
func parseOnServeMux(pattern string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	http.NewServeMux().Handle(pattern, http.NotFoundHandler())
	return nil
}
