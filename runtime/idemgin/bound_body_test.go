package idemgin_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/gin-gonic/gin/binding"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// gin's ShouldBindBodyWith reads the request's body once and keeps the
// bytes in the Context, so that every later binder reads them again; it
// is gin's documented way to look at a body in middleware and bind it in
// the handler. Middleware in front of idemgin.Middleware that does so (a
// signature check, an audit log, authentication reading the body) leaves
// c.Request.Body drained: the engine fingerprints an empty body, while the
// handler binds the body the client sent from the Context. Two requests
// under one key with different bodies then share a fingerprint: the second
// is answered with the replay of the first (docs/semantics.md §3.5 says
// 422 idempotency-key-reused), and its client takes another request's
// answer for its own.
func TestBodyBoundInFrontIsFingerprinted(t *testing.T) {
	e, db := adaptertest.Engine(t)
	type transfer struct {
		Amount int `json:"amount"`
	}
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(func(c *gin.Context) {
		var seen transfer
		_ = c.ShouldBindBodyWith(&seen, binding.JSON) // audit, signature, …
		c.Request = adaptertest.WithTenant(c.Request)
	}, idemgin.Middleware(e))
	g.POST("/transfers", func(c *gin.Context) {
		var in transfer
		if err := c.ShouldBindBodyWith(&in, binding.JSON); err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		tx, err := idem.TxFor[*sqlitestore.Tx](c, adaptertest.Op)
		if err != nil {
			c.String(http.StatusInternalServerError, err.Error())
			return
		}
		if _, err := tx.ExecContext(c, `INSERT INTO transfers (amount) VALUES (?)`, in.Amount); err != nil {
			c.String(http.StatusInternalServerError, err.Error())
			return
		}
		c.JSON(http.StatusCreated, gin.H{"amount": in.Amount})
	})
	first := adaptertest.Post(g, "k1", `{"amount":5}`)
	other := adaptertest.Post(g, "k1", `{"amount":500}`)
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	if other.Code != http.StatusUnprocessableEntity {
		t.Fatalf("a second request under the same key with another body (amount 500) was answered %d %s (Idempotent-Replayed %q); want 422 idempotency-key-reused",
			other.Code, other.Body, other.Header().Get("Idempotent-Replayed"))
	}
	if n := adaptertest.Transfers(t, db); n != 1 {
		t.Errorf("%d transfers written", n)
	}
}
