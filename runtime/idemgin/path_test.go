package idemgin_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// customers serves POST /customers/{id} (updateCustomer, changed by
// update) and POST /customers/{id}/balance (createBalance) behind
// Middleware, each fingerprinting id, and counts createBalance's runs. gin
// routes on the decoded path: to it, /customers/c1%2Fbalance is
// createBalance for c1; to the engine, as to ServeMux, it is
// updateCustomer for "c1/balance".
func customers(t *testing.T, balanceRuns *atomic.Int64, update ...func(*idem.Policy)) *gin.Engine {
	t.Helper()
	e, _ := adaptertest.Engine(t, func(c *idem.Config) {
		c.Policies = []idem.Policy{
			idemtest.Policy("updateCustomer", "/customers/{id}", append([]func(*idem.Policy){withID}, update...)...),
			idemtest.Policy("createBalance", "/customers/{id}/balance", withID),
		}
	})
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(authenticate, idemgin.Middleware(e))
	g.POST("/customers/:id", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"updated": c.Param("id")}) })
	g.POST("/customers/:id/balance", func(c *gin.Context) {
		balanceRuns.Add(1)
		c.JSON(http.StatusCreated, gin.H{"credited": c.Param("id")})
	})
	if err := idemgin.CheckRoutes(e, g); err != nil {
		t.Fatal(err)
	}
	return g
}

// withID fingerprints the path parameter id, as the generator does.
func withID(p *idem.Policy) { p.Fingerprint = fingerprint.Spec{Path: []string{"id"}} }

// send posts a JSON body to path on g, under key when it is not "".
func send(g http.Handler, path, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"amount":100}`))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	return w
}

// problemOf is the problem type a response names, "" for none.
func problemOf(w *httptest.ResponseRecorder) string {
	if !strings.HasPrefix(w.Header().Get("Content-Type"), "application/problem+json") {
		return ""
	}
	for _, name := range []string{problem.NonCanonicalPath, problem.RouteMismatch} {
		if strings.Contains(w.Body.String(), name) {
			return name
		}
	}
	return "other"
}

// One key runs createBalance once: the same key sent with the resource's
// "/" escaped is refused, not run as another operation's request.
func TestAnEscapedSlashRunsNoOperationTwice(t *testing.T) {
	var balanceRuns atomic.Int64
	g := customers(t, &balanceRuns)
	first := send(g, "/customers/c1/balance", "k1")
	again := send(g, "/customers/c1%2Fbalance", "k1")
	if first.Code != http.StatusCreated || balanceRuns.Load() != 1 {
		t.Fatalf("first = %d %s, %d runs; want 201 and 1", first.Code, first.Body, balanceRuns.Load())
	}
	if again.Code != http.StatusBadRequest || problemOf(again) != problem.NonCanonicalPath {
		t.Fatalf("escaped slash = %d %s, want 400 %s", again.Code, again.Body, problem.NonCanonicalPath)
	}
}

// A required key cannot be taken off by escaping the "/" that leads to
// the operation that requires it.
func TestAnEscapedSlashTakesNoRequiredKeyOff(t *testing.T) {
	var balanceRuns atomic.Int64
	g := customers(t, &balanceRuns, func(p *idem.Policy) { p.Required = false })
	for _, path := range []string{"/customers/c1/balance", "/customers/c1%2Fbalance"} {
		if w := send(g, path, ""); w.Code != http.StatusBadRequest {
			t.Errorf("%s without a key = %d %s, want 400", path, w.Code, w.Body)
		}
	}
	if n := balanceRuns.Load(); n != 0 {
		t.Fatalf("createBalance, which requires a key, ran %d times without one", n)
	}
}

// A client cannot switch an operation to durable mode (docs/semantics.md
// §5.3) by escaping a "/" into a route with no policy below a
// transactional operation's path: gin would run that route's handler,
// which never takes the transaction, under the transactional operation's
// policy.
func TestAnEscapedSlashSwitchesNoOperationToDurableMode(t *testing.T) {
	var logs bytes.Buffer
	e, _ := adaptertest.Engine(t, func(c *idem.Config) {
		c.Policies = []idem.Policy{idemtest.Policy("updateCustomer", "/customers/{id}", withID, func(p *idem.Policy) { p.Transactional = true })}
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(authenticate, idemgin.Middleware(e))
	g.POST("/customers/:id", func(c *gin.Context) {
		if _, err := idem.TxFor[*sqlitestore.Tx](c, "updateCustomer"); err != nil {
			c.String(http.StatusInternalServerError, err.Error())
			return
		}
		c.JSON(http.StatusOK, gin.H{"updated": c.Param("id")})
	})
	g.POST("/customers/:id/notes", func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"noted": c.Param("id")}) })
	if err := idemgin.CheckRoutes(e, g); err != nil {
		t.Fatal(err)
	}
	w := send(g, "/customers/c1%2Fnotes", "k1")
	if strings.Contains(logs.String(), "did not take its transaction") || w.Code != http.StatusBadRequest {
		t.Fatalf("one client request (%d %s) switched updateCustomer to durable mode, or was not refused: %s", w.Code, w.Body, logs.String())
	}
}

// A route gin prefers to the operation the engine read from the path (a
// literal beside a parameter: /customers/me beside /customers/{id}) is
// refused with route-mismatch: its handler never runs under the other
// operation's policy, and the transactional operation stays as it is.
func TestMiddlewareRefusesARouteOfAnotherOperation(t *testing.T) {
	var logs bytes.Buffer
	var meRuns atomic.Int64
	e, _ := adaptertest.Engine(t, func(c *idem.Config) {
		c.Policies = []idem.Policy{idemtest.Policy("updateCustomer", "/customers/{id}", withID, func(p *idem.Policy) { p.Transactional = true })}
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(authenticate, idemgin.Middleware(e))
	g.POST("/customers/:id", func(c *gin.Context) { c.Status(http.StatusOK) })
	g.POST("/customers/me", func(c *gin.Context) {
		meRuns.Add(1)
		c.Status(http.StatusOK)
	})
	w := send(g, "/customers/me", "k1")
	if w.Code != http.StatusInternalServerError || problemOf(w) != problem.RouteMismatch || meRuns.Load() != 0 {
		t.Fatalf("/customers/me = %d %s after %d runs, want 500 %s and none", w.Code, w.Body, meRuns.Load(), problem.RouteMismatch)
	}
	if strings.Contains(logs.String(), "did not take its transaction") {
		t.Fatalf("a request gin routed elsewhere switched updateCustomer to durable mode: %s", logs.String())
	}
}
