package idem_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemchi"
)

// behindChi is cfg's engine in front of chi serving POST protected and
// POST other, with CheckRoutes passed; runs counts the runs of protected's
// handler.
func behindChi(t *testing.T, cfg idem.Config, protected, other string) (http.Handler, *atomic.Int64) {
	t.Helper()
	e := newEngine(t, cfg)
	var runs atomic.Int64
	r := chi.NewRouter()
	r.Post(protected, created(&runs))
	r.Post(other, created(new(atomic.Int64)))
	if err := e.CheckRoutes(idem.BehindMiddleware, idemchi.Lookup(r)); err != nil {
		t.Fatalf("CheckRoutes: %v", err)
	}
	return e.Middleware(r), &runs
}

// A route without a policy (Config.Unprotected) whose template ends in a
// parameter that shares its segment with text ("/files/v{version}",
// "/range/{from}-{to}") is more specific than a protected whole-segment
// parameter on the same path ("/files/{name}"). chi never gives a
// parameter an empty value at the end of a path, and serves "/files/v"
// with the protected operation's handler, name "v"; the engine must read
// it so too, not as the unprotected route's to pass through.
// docs/semantics.md §7.1: which policy applies is decided from the
// request as the router will see it; the request must not reach a
// protected operation's handler without its policy.
func TestUnprotectedMixedRouteWithEmptyLastParamBehindChi(t *testing.T) {
	for _, c := range []struct{ protected, unprotected, path string }{
		{"/files/{name}", "/files/v{version}", "/files/v"},
		{"/range/{span}", "/range/{from}-{to}", "/range/1-"},
	} {
		t.Run(c.path, func(t *testing.T) {
			h, runs := behindChi(t, idem.Config{
				Policies:    []idem.Policy{pathPolicy("protectedOp", c.protected, strings.Trim(c.protected[strings.LastIndexByte(c.protected, '/')+1:], "{}"))},
				Unprotected: []idem.Route{{Method: http.MethodPost, Path: c.unprotected, OperationID: "unprotectedOp"}},
			}, c.protected, c.unprotected)
			// The policy requires a key: without one the operation must
			// not run at all.
			codes := []int{post(t, h, c.path, "k1").Code, post(t, h, c.path, "k1").Code, post(t, h, c.path, "").Code}
			if n := runs.Load(); n > 1 {
				t.Fatalf("POST %s: chi ran the protected operation's handler (%s) %d times, twice under one key and once with no key (statuses %v), while the engine let it through as the unprotected route %s",
					c.path, c.protected, n, codes, c.unprotected)
			}
		})
	}
}

// The same reading with both routes protected: the engine must not apply
// /files/v{version}'s policy, whose key is optional, to a request chi
// serves with /files/{name}'s handler, whose policy requires a key, or a
// keyless request runs that handler with nothing remembered, twice for
// two sends. docs/semantics.md §7.1: of the templates that match a path,
// the most specific is the router's, as chi chooses.
func TestMixedRouteWithEmptyLastParamLendsItsPolicyBehindChi(t *testing.T) {
	optional := pathPolicy("uploadVersion", "/files/v{version}", "version")
	optional.Required = false
	h, uploads := behindChi(t, idem.Config{Policies: []idem.Policy{pathPolicy("upload", "/files/{name}", "name"), optional}},
		"/files/{name}", "/files/v{version}")
	codes := []int{post(t, h, "/files/v", "").Code, post(t, h, "/files/v", "").Code}
	if n := uploads.Load(); n > 0 {
		t.Fatalf("POST /files/v without a key: chi ran upload (/files/{name}, key required) %d times (statuses %v) under uploadVersion's policy, whose key is optional; want it refused and nothing run",
			n, codes)
	}
}

// docs/runtime.md's own example: POST /pay/batch, without a policy, beside
// a protected POST /pay/{id}. ServeMux decodes "/pay/b%61tch" to the batch
// route's path; chi matches the path as the request escaped it, where
// "b%61tch" is no "batch", and serves it with /pay/{id}'s handler. The
// engine must not let it through as the batch route's.
// docs/semantics.md §7.1: a path that reaches a protected operation only
// through a needless escape is 400 non-canonical-path, and nothing runs.
func TestNeedlessEscapeOfUnprotectedLiteralBehindChi(t *testing.T) {
	refusedBehindChi(t, idem.Config{
		Policies:    []idem.Policy{pathPolicy("pay", "/pay/{id}", "id")},
		Unprotected: []idem.Route{{Method: http.MethodPost, Path: "/pay/batch", OperationID: "payBatch"}},
	}, "/pay/{id}", "/pay/batch", "/pay/b%61tch")
}

// refusedBehindChi sends POST path twice under one key to behindChi's
// engine and router, and fails when chi ran protected's handler: the
// engine must refuse the path, which it reads as other's.
func refusedBehindChi(t *testing.T, cfg idem.Config, protected, other, path string) {
	t.Helper()
	h, runs := behindChi(t, cfg, protected, other)
	codes := []int{post(t, h, path, "k1").Code, post(t, h, path, "k1").Code}
	if n := runs.Load(); n > 0 {
		t.Fatalf("POST %s: chi ran the protected %s handler %d times under one key (statuses %v), while the engine let the request through as the unprotected %s; want 400 non-canonical-path and nothing run",
			path, protected, n, codes, other)
	}
}

// A path holding "%2F" whose decoded reading is another operation's is
// refused when it matched a protected operation (docs/runtime.md: gin
// routes on the decoded path), and must be when it matched an unprotected
// route first as well: "/pay/x%2Fy/refund" is POST /pay/{id}/refund,
// without a policy, to the engine, and /pay/{id}/{action}/refund,
// protected, to gin, which would run it with no key and again for the
// retry. docs/semantics.md §7.1: a path holding an escaped "/" whose
// decoded reading is another operation is 400 non-canonical-path.
func TestDecodedSlashPastUnprotectedRouteBehindGin(t *testing.T) {
	e := newEngine(t, idem.Config{
		Policies: []idem.Policy{
			pathPolicy("act", "/pay/{id}/{action}", "id", "action"),
			pathPolicy("actRefund", "/pay/{id}/{action}/refund", "id", "action"),
		},
		Unprotected: []idem.Route{{Method: http.MethodPost, Path: "/pay/{id}/refund", OperationID: "refund"}},
	})
	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	var runs atomic.Int64
	ran := func(c *gin.Context) { c.Status(http.StatusCreated) }
	g.POST("/pay/:id/:action", ran)
	g.POST("/pay/:id/refund", ran)
	g.POST("/pay/:id/:action/refund", gin.WrapF(created(&runs)))
	h := e.Middleware(g)
	codes := []int{post(t, h, "/pay/x%2Fy/refund", "k1").Code, post(t, h, "/pay/x%2Fy/refund", "k1").Code}
	if n := runs.Load(); n > 0 {
		t.Fatalf("POST /pay/x%%2Fy/refund: gin ran the protected /pay/{id}/{action}/refund handler %d times under one key (statuses %v), while the engine let the request through as the unprotected /pay/{id}/refund; want 400 non-canonical-path and nothing run",
			n, codes)
	}
}

// chi takes an empty segment for a whole parameter's value ("//v1" is
// /{a}/v1's, a = ""), never for a segment that mixes parameters with
// text. The engine refuses such a path when the reading makes it a
// protected operation's; it must not read the empty segment as the
// unprotected /{a}-{b}/v1's and let it through.
func TestEmptySegmentIsNoMixedUnprotectedSegmentBehindChi(t *testing.T) {
	refusedBehindChi(t, idem.Config{
		Policies:    []idem.Policy{pathPolicy("v1", "/{a}/v1", "a")},
		Unprotected: []idem.Route{{Method: http.MethodPost, Path: "/{a}-{b}/v1", OperationID: "rangeV1"}},
	}, "/{a}/v1", "/{a}-{b}/v1", "//v1")
}
