package routers

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/idemgen/idemgen/runtime/idem"
)

// docs:begin gorilla
// GorillaLookup is the route lookup of a gorilla/mux router: Match finds
// the route without serving, and GetHandler is its own handler, without
// the router's middleware.
func GorillaLookup(r *mux.Router) idem.RouteLookup {
	return func(req *http.Request) (http.Handler, string) {
		var m mux.RouteMatch
		if !r.Match(req, &m) || m.MatchErr != nil {
			return nil, ""
		}
		route, err := m.Route.GetPathTemplate()
		if err != nil {
			return nil, ""
		}
		return m.Route.GetHandler(), route
	}
}

// docs:end gorilla
