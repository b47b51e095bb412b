package routers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idemgin"
)

// docs:begin gin
// GinRoutes registers routes on a gin engine and mirrors them in a
// ServeMux: gin cannot find a route without serving the request, and the
// mirror's Handler can. It checks what was registered, not gin's own
// matching (its trailing-slash redirects, say).
type GinRoutes struct {
	Gin    *gin.Engine
	mirror http.ServeMux
}

// Handle registers h for method and path.
func (r *GinRoutes) Handle(method, path string, h http.Handler) {
	r.Gin.Handle(method, path, gin.WrapH(h))
	r.mirror.Handle(method+" "+idemgin.ServeMuxPath(path), h)
}

// Lookup is the route lookup for CheckRoutes.
func (r *GinRoutes) Lookup(req *http.Request) (http.Handler, string) {
	return r.mirror.Handler(req)
}

// docs:end gin
