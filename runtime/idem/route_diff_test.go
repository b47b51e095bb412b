package idem_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// The differential tests hold the engine to the router's view of a
// request: whenever the real router sends a request to a protected
// operation's handler, the engine must have claimed the request's key for
// that operation, with a fingerprint over the same path parameter values
// the router handed the handler, or refused it. Random template sets
// (parameters sharing a segment with text before or after them, routes
// without a policy beside protected ones) and random requests
// (percent-encoded literals and values, needless and lower-case escapes,
// %2F inside values, empty values, dot segments, doubled and trailing
// slashes, non-ASCII literals, prefixes, and characters a URL must escape
// left raw in the request line: bytes beyond ASCII, '"', '<', '{', '|',
// '^', '`') look for a request the two read differently. Each request is
// written as a request line and read back with net/http's own request
// reader (http.ReadRequest), so that URL.Path and URL.RawPath are what a
// server hands the router.

// claimLog records every claim by key.
type claimLog struct {
	idemstore.Store
	mu     sync.Mutex
	claims map[string]idemstore.Claim
}

func (s *claimLog) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	s.mu.Lock()
	s.claims[c.Key] = c
	s.mu.Unlock()
	return s.Store.Claim(ctx, c)
}

// routed is what a router handed a handler.
type routed struct {
	op     string
	params map[string]string
	// unprotected marks a route of Config.Unprotected.
	unprotected bool
}

// diffRoute is one route of a random set: a protected operation's, or
// one without a policy.
type diffRoute struct {
	tmpl, op    string
	unprotected bool
}

// diffRouter is a real router with one handler per template.
type diffRouter interface {
	http.Handler
	// add routes POST tmpl to h; wrap protects the route's handler (the
	// identity in middleware mode, Engine.Handler per route).
	add(tmpl string, params []string, wrap func(http.Handler) http.Handler, h func(r *http.Request, params map[string]string))
}

type muxRouter struct{ *http.ServeMux }

func (m muxRouter) add(tmpl string, params []string, wrap func(http.Handler) http.Handler, h func(*http.Request, map[string]string)) {
	m.Handle("POST "+tmpl, wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vals := map[string]string{}
		for _, p := range params {
			vals[p] = r.PathValue(p)
		}
		h(r, vals)
		w.WriteHeader(http.StatusCreated)
	})))
}

type chiRouter struct{ chi.Router }

func (c chiRouter) add(tmpl string, params []string, wrap func(http.Handler) http.Handler, h func(*http.Request, map[string]string)) {
	// chi compares literals with the path as the request spelled it, so
	// a route is registered the way a spec author writes it: decoded.
	if d, err := url.PathUnescape(tmpl); err == nil {
		tmpl = d
	}
	c.Method(http.MethodPost, tmpl, wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vals := map[string]string{}
		for _, p := range params {
			// chi hands out parameters as they stand in the escaped
			// path when the path needs its escapes (RawPath is set), and
			// decoded otherwise.
			v := chi.URLParam(r, p)
			if r.URL.RawPath != "" {
				if d, err := url.PathUnescape(v); err == nil {
					v = d
				}
			}
			vals[p] = v
		}
		h(r, vals)
		w.WriteHeader(http.StatusCreated)
	})))
}

var (
	// plainWords need no escape in a path.
	plainWords = []string{"accounts", "orders", "v1", "x.y", "pets", "a:b"}
	allWords   = append([]string{"café", "é", "a b"}, plainWords...)
	valueRunes = []string{"a", "b", "1", "/", "%", " ", "é", ".", "-", ":", "..", "?", "#", `"`, "<", "{", "|", "^", "`"}
)

// diffCase is one router in one mounting.
type diffCase struct {
	name string
	// newRouter makes the router, with e's middleware of its own when it
	// has one (adapter).
	newRouter func(e *idem.Engine) diffRouter
	// mixed allows templates with parameters that share a segment with
	// text (ServeMux has no such patterns).
	mixed bool
	// perRoute mounts Engine.Handler on every route instead of the
	// middleware in front of the router.
	perRoute bool
	// adapter is a router that newRouter mounted the engine in, through
	// the router's adapter (idemgin, idemecho).
	adapter bool
	// words are the literal segments templates are made of.
	words []string
	// normalizes marks a router that rewrites paths before matching
	// (StripSlashes): its handler may see fewer distinct values than the
	// engine fingerprints, so only the safe direction is asked for: one
	// fingerprint never stands for two different sets of values.
	normalizes bool
	// unprotected makes some templates routes without a policy
	// (Config.Unprotected) beside the protected ones.
	unprotected bool
}

// randomTemplates makes up to n templates; mixed segments only for routers
// that support them.
func randomTemplates(rng *rand.Rand, n int, mixed bool, literalWords []string) []string {
	var out []string
	for range n {
		var b strings.Builder
		segs := 1 + rng.IntN(3)
		p := 0
		for range segs {
			b.WriteByte('/')
			switch k := rng.IntN(5); {
			case k < 3:
				b.WriteString(url.PathEscape(literalWords[rng.IntN(len(literalWords))]))
			case k == 3 || !mixed:
				fmt.Fprintf(&b, "{p%d}", p)
				p++
			default:
				switch rng.IntN(4) {
				case 0:
					fmt.Fprintf(&b, "{p%d}.json", p)
				case 1:
					fmt.Fprintf(&b, "{p%d}:cancel", p)
				case 2:
					fmt.Fprintf(&b, "v{p%d}", p)
				default:
					fmt.Fprintf(&b, "{p%d}-{p%d}", p, p+1)
					p++
				}
				p++
			}
		}
		out = append(out, b.String())
	}
	return out
}

// randomPath is a request path aimed at tmpl, spelled in one of the ways a
// client or attacker might.
func randomPath(rng *rand.Rand, tmpl string) string {
	var b strings.Builder
	// raw leaves in the request line every character net/http keeps as
	// written (URL.RawPath) though a URL must escape it: bytes beyond
	// ASCII, '"', '<', '{', '|', '^', '`'.
	raw := rng.IntN(4) == 0
	if rng.IntN(8) == 0 {
		b.WriteString("/v1")
	}
	for _, seg := range strings.Split(tmpl[1:], "/") {
		b.WriteByte('/')
		if rng.IntN(12) == 0 {
			b.WriteString([]string{"", ".", "..", "%2e"}[rng.IntN(4)] + "/")
		}
		for i := 0; i < len(seg); {
			if seg[i] == '{' {
				end := strings.IndexByte(seg[i:], '}')
				var v strings.Builder
				// An empty value is the text around the parameter alone
				// ("/files/v" for "/files/v{version}").
				for range rng.IntN(4) {
					v.WriteString(valueRunes[rng.IntN(len(valueRunes))])
				}
				if rng.IntN(2) == 0 {
					b.WriteString(url.PathEscape(v.String()))
				} else {
					b.WriteString(escapeSome(rng, v.String(), raw))
				}
				i += end + 1
				continue
			}
			c := seg[i]
			switch {
			case rng.IntN(6) != 0 || c == '%':
				b.WriteByte(c)
			case rng.IntN(4) == 0:
				fmt.Fprintf(&b, "%%%02x", c) // a lower-case escape
			default:
				fmt.Fprintf(&b, "%%%02X", c)
			}
			i++
		}
	}
	if rng.IntN(8) == 0 {
		b.WriteByte('/')
	}
	if raw {
		// Non-ASCII literals as curl sends them when typed.
		return unescapeNonASCII(b.String())
	}
	return b.String()
}

// unescapeNonASCII writes each run of escapes of bytes beyond ASCII that
// spells UTF-8 ("%C3%A9") as its raw bytes ("é").
func unescapeNonASCII(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); {
		j := i
		for j+2 < len(p) && p[j] == '%' && p[j+1] >= '8' && p[j+1] <= 'F' {
			j += 3
		}
		if j > i {
			if d, err := url.PathUnescape(p[i:j]); err == nil && utf8.ValidString(d) {
				b.WriteString(d)
				i = j
				continue
			}
		}
		b.WriteByte(p[i])
		i++
	}
	return b.String()
}

// escapeSome escapes only what a request line cannot carry, leaving "/",
// "%" (when it starts a valid escape) and the rest raw; bytes beyond ASCII
// too when raw is set.
func escapeSome(rng *rand.Rand, v string, raw bool) string {
	var b strings.Builder
	for _, r := range v {
		switch {
		case r == ' ' || r == '?' || r == '#' || (r > 0x7e && !raw) || (r == '%' && rng.IntN(2) == 0):
			b.WriteString(url.PathEscape(string(r)))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func templateParams(tmpl string) []string {
	var out []string
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(tmpl[i:], '}')
		out = append(out, tmpl[i+1:i+j])
		tmpl = tmpl[i+j+1:]
	}
}

func runDifferential(t *testing.T, dc diffCase) {
	name := dc.name
	rounds, perRound := 300, 40
	if testing.Short() {
		rounds = 50
	}
	seed := uint64(0x1de4)
	// IDEMGEN_DIFF_SEED and IDEMGEN_DIFF_ROUNDS explore further than CI.
	if v, err := strconv.ParseUint(os.Getenv("IDEMGEN_DIFF_SEED"), 10, 64); err == nil {
		seed = v
	}
	if v, err := strconv.Atoi(os.Getenv("IDEMGEN_DIFF_ROUNDS")); err == nil {
		rounds = v
	}
	checked := 0
	for round := range rounds {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		tmpls := randomTemplates(rng, 1+rng.IntN(4), dc.mixed, dc.words)
		var (
			policies    []idem.Policy
			unprotected []idem.Route
			routes      []diffRoute // every route, in the order the router gets them
			hits        = map[string]routed{}
			mu          sync.Mutex
			used        = map[string]bool{}
		)
		for i, tm := range tmpls {
			if used[tm] {
				continue
			}
			used[tm] = true
			r := diffRoute{tmpl: tm, op: fmt.Sprintf("op%d", i), unprotected: dc.unprotected && rng.IntN(3) == 0}
			if r.unprotected {
				unprotected = append(unprotected, idem.Route{Method: http.MethodPost, Path: tm, OperationID: r.op})
			} else {
				policies = append(policies, pathPolicy(r.op, tm, templateParams(tm)...))
			}
			routes = append(routes, r)
		}
		store := &claimLog{Store: memstore.New(), claims: map[string]idemstore.Claim{}}
		e, err := idem.New(idem.Config{Store: store, Policies: policies, Unprotected: unprotected, Tenant: func(*http.Request) (string, bool) { return "t", true }})
		if err != nil {
			continue // overlapping templates: the engine refuses to start
		}
		router := dc.newRouter(e)
		ok := func() (ok bool) {
			defer func() {
				if recover() != nil {
					ok = false // the router refused the set (conflicting patterns)
				}
			}()
			for _, rt := range routes {
				wrap := func(h http.Handler) http.Handler { return h }
				if dc.perRoute && !rt.unprotected {
					wrap = func(h http.Handler) http.Handler { return e.Handler(rt.op, h) }
				}
				router.add(rt.tmpl, templateParams(rt.tmpl), wrap, func(r *http.Request, vals map[string]string) {
					mu.Lock()
					hits[r.Header.Get("Idempotency-Key")] = routed{op: rt.op, params: vals, unprotected: rt.unprotected}
					mu.Unlock()
				})
			}
			return true
		}()
		if !ok {
			continue
		}
		fps := map[string]*fingerprint.Compiled{}
		for _, p := range policies {
			fps[p.OperationID], _ = fingerprint.Compile(p.Fingerprint)
		}
		byFingerprint := map[string]string{}
		var h http.Handler = router
		if !dc.perRoute && !dc.adapter {
			h = e.Middleware(router)
		}
		for i := range perRound {
			path := randomPath(rng, tmpls[rng.IntN(len(tmpls))])
			key := fmt.Sprintf("k%d-%d", round, i)
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("POST " + path + " HTTP/1.1\r\nHost: example.test\r\n" +
				"Content-Type: application/json\r\nIdempotency-Key: " + key + "\r\nContent-Length: 2\r\n\r\n{}")))
			if err != nil {
				continue // no server reads this request line
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			hit, ran := hits[key]
			if !ran {
				continue
			}
			c, claimed := store.claims[key]
			if hit.unprotected {
				if claimed {
					t.Fatalf("%s: seed %d round %d: POST %s reached %s, a route without a policy, but the engine claimed %q for %q (templates %q)",
						name, seed, round, path, hit.op, key, c.Operation, tmpls)
				}
				continue
			}
			checked++
			if !claimed || c.Operation != hit.op {
				t.Fatalf("%s: seed %d round %d: POST %s reached %s (%v) but the engine claimed %q for %q (templates %q)",
					name, seed, round, path, hit.op, hit.params, key, c.Operation, tmpls)
			}
			if dc.normalizes {
				seen := fmt.Sprint(hit.params)
				if prev, dup := byFingerprint[hit.op+string(c.Fingerprint)]; dup && prev != seen {
					t.Fatalf("%s: seed %d round %d: one fingerprint of %s stands for params %s and %s (templates %q)",
						name, seed, round, hit.op, prev, seen, tmpls)
				}
				byFingerprint[hit.op+string(c.Fingerprint)] = seen
				continue
			}
			want, err := fps[hit.op].Sum(fingerprint.Input{MediaType: "application/json", Body: []byte(`{}`), Path: hit.params})
			if err != nil {
				t.Fatal(err)
			}
			if string(want[:]) != string(c.Fingerprint) {
				t.Fatalf("%s: seed %d round %d: POST %s reached %s with params %v, but the engine fingerprinted other values (templates %q)",
					name, seed, round, path, hit.op, hit.params, tmpls)
			}
		}
	}
	if checked < rounds {
		t.Fatalf("%s: only %d requests reached a handler; the generator is too weak to test anything", name, checked)
	}
	t.Logf("%s: %d requests reached a protected handler, each under its own policy", name, checked)
}

func TestDifferentialServeMux(t *testing.T) {
	newMux := func(*idem.Engine) diffRouter { return muxRouter{http.NewServeMux()} }
	runDifferential(t, diffCase{name: "ServeMux", newRouter: newMux, words: allWords, unprotected: true})
	runDifferential(t, diffCase{name: "ServeMux per route", newRouter: newMux, words: allWords, perRoute: true, unprotected: true})
}

// chi matches literals against the path as the request escaped it when it
// has escapes, and decoded otherwise; with a literal that needs escaping
// (non-ASCII, a space) that makes a route depend on another segment's
// spelling, which no middleware in front
// of the router can foresee. chi lets a parameter in a mixed segment be
// empty within the path but not at its end ("/{a}-{b}/x" matches "/1-/x",
// "/{a}-{b}" does not match "/1-", which a parameter route takes), and the
// engine reads it so: every request chi hands a protected handler was
// claimed under that handler's own policy, mixed segments and routes
// without a policy included. Engine.Handler on each route takes the
// operation from the route itself and holds with every literal and
// template.
func TestDifferentialChi(t *testing.T) {
	newChi := func(*idem.Engine) diffRouter { return chiRouter{chi.NewRouter()} }
	newStripping := func(*idem.Engine) diffRouter {
		r := chi.NewRouter()
		r.Use(middleware.StripSlashes)
		return chiRouter{r}
	}
	runDifferential(t, diffCase{name: "chi", newRouter: newChi, words: plainWords, unprotected: true})
	runDifferential(t, diffCase{name: "chi+StripSlashes", newRouter: newStripping, words: plainWords, normalizes: true, unprotected: true})
	runDifferential(t, diffCase{name: "chi, mixed segments", newRouter: newChi, mixed: true, words: plainWords, unprotected: true})
	runDifferential(t, diffCase{name: "chi per route", newRouter: newChi, mixed: true, words: allWords, perRoute: true, unprotected: true})
	runDifferential(t, diffCase{name: "chi+StripSlashes per route", newRouter: newStripping, mixed: true, words: allWords, perRoute: true, normalizes: true, unprotected: true})
}

// ginRouter is gin as it comes (UseRawPath false): it routes on the
// decoded path, where an escaped "/" separates segments, and hands out
// parameters decoded.
type ginRouter struct{ *gin.Engine }

func (g ginRouter) add(tmpl string, params []string, wrap func(http.Handler) http.Handler, h func(*http.Request, map[string]string)) {
	g.POST(colonParams(tmpl), gin.WrapH(wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vals := map[string]string{}
		for _, p := range params {
			vals[p] = routeParam(r, p)
		}
		h(r, vals)
		w.WriteHeader(http.StatusCreated)
	}))))
}

// echoRouter is echo, which routes on the path as the request escaped it
// when it needs its escapes (RawPath), as chi does, and hands out
// parameters as they stand there.
type echoRouter struct{ *echo.Echo }

func (ec echoRouter) add(tmpl string, params []string, wrap func(http.Handler) http.Handler, h func(*http.Request, map[string]string)) {
	ec.POST(colonParams(tmpl), func(c echo.Context) error {
		wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			vals := map[string]string{}
			for _, p := range params {
				v := c.Param(p)
				if r.URL.RawPath != "" {
					if d, err := url.PathUnescape(v); err == nil {
						v = d
					}
				}
				vals[p] = v
			}
			h(r, vals)
			w.WriteHeader(http.StatusCreated)
		})).ServeHTTP(c.Response(), c.Request())
		return nil
	})
}

// ginParams carries gin's parameters to the wrapped handler.
type ginParams struct{}

// routeParam is the gin parameter p of the request r, which
// withGinParams put in its context.
func routeParam(r *http.Request, p string) string {
	ps, _ := r.Context().Value(ginParams{}).(gin.Params)
	return ps.ByName(p)
}

// colonParams writes a template as gin and echo write a route: "{p0}" as
// ":p0", literals decoded (they compare them with the decoded path).
func colonParams(tmpl string) string {
	if d, err := url.PathUnescape(tmpl); err == nil {
		tmpl = d
	}
	return strings.NewReplacer("{", ":", "}", "").Replace(tmpl)
}

// colonWords are the literals gin and echo can route: a ":" starts a
// parameter in either.
var colonWords = []string{"accounts", "orders", "v1", "x.y", "pets"}

// gin routes on the decoded path, so an escaped "/" in a value makes it
// another route than the engine's: behind Engine.Middleware the engine
// refuses every path a decoding router reads elsewhere, and behind
// idemgin.Middleware it also refuses whatever gin routes to another
// operation than the one the engine read. With UseRawPath gin routes on
// the path as written (URL.RawPath), as chi does.
func TestDifferentialGin(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	useRawPath := false
	newGin := func(mw ...gin.HandlerFunc) func(*idem.Engine) diffRouter {
		return func(e *idem.Engine) diffRouter {
			g := gin.New()
			g.ContextWithFallback = true
			g.UseRawPath = useRawPath
			for _, m := range mw {
				g.Use(m)
			}
			g.Use(func(c *gin.Context) {
				c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), ginParams{}, c.Params))
			})
			return ginRouter{g}
		}
	}
	words := append([]string{"café", "a b"}, colonWords...)
	runDifferential(t, diffCase{name: "gin", newRouter: newGin(), words: words, unprotected: true})
	adapted := func(e *idem.Engine) diffRouter { return newGin(idemgin.Middleware(e))(e) }
	runDifferential(t, diffCase{name: "gin behind idemgin.Middleware", newRouter: adapted, words: words, adapter: true, unprotected: true})
	useRawPath = true
	runDifferential(t, diffCase{name: "gin UseRawPath", newRouter: newGin(), words: words, unprotected: true})
	runDifferential(t, diffCase{name: "gin UseRawPath behind idemgin.Middleware", newRouter: adapted, words: words, adapter: true, unprotected: true})
}

// echo routes on the path as the request escaped it, as the engine does,
// but its parameter at the root takes the whole path ("/{id}" serves
// "/a/b"): behind idemecho.Middleware, which compares echo's route with
// the engine's operation, nothing reaches a handler unprotected.
func TestDifferentialEcho(t *testing.T) {
	newEcho := func(e *idem.Engine) diffRouter {
		ec := echo.New()
		ec.Use(idemecho.Middleware(e))
		return echoRouter{ec}
	}
	runDifferential(t, diffCase{name: "echo behind idemecho.Middleware", newRouter: newEcho, words: colonWords, adapter: true, unprotected: true})
}
