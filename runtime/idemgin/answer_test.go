package idemgin_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// renderErrors is gin's documented error-handling middleware: handlers
// report a failure with c.Error and return, and this middleware, Use'd
// first, renders the answer once the chain has run.
func renderErrors(c *gin.Context) {
	c.Next()
	if err := c.Errors.Last(); err != nil {
		c.JSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
	}
}

// A gin handler that fails the way gin documents (c.Error, return, an
// error middleware in front renders 500) gave the engine no answer: such a
// request stores nothing and its transaction rolls back (docs/semantics.md
// §3.4, §5), where gin's default 200 written inside the engine committed
// the half-done writes and stored an empty 200 that every retry replayed.
func TestAFailedHandlerIsNoSuccess(t *testing.T) {
	e, db := adaptertest.Engine(t)
	var runs atomic.Int64
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(renderErrors, authenticate, idemgin.Middleware(e))
	g.POST("/transfers", func(c *gin.Context) {
		runs.Add(1)
		tx, err := idem.TxFor[*sqlitestore.Tx](c, adaptertest.Op)
		if err != nil {
			_ = c.Error(err)
			return
		}
		if _, err := tx.ExecContext(c, `INSERT INTO transfers (amount) VALUES (1)`); err != nil {
			_ = c.Error(err)
			return
		}
		// The processor declines after the first write.
		_ = c.Error(errors.New("processor declined"))
	})
	first := adaptertest.Post(g, "k1", `{}`)
	retry := adaptertest.Post(g, "k1", `{}`)
	t.Logf("first %d %q; retry %d replayed=%q %q; transfers %d; runs %d",
		first.Code, first.Body, retry.Code, retry.Header().Get("Idempotent-Replayed"), retry.Body,
		adaptertest.Transfers(t, db), runs.Load())
	if first.Code < 500 {
		t.Errorf("a failed handler answered %d, want a 5xx", first.Code)
	}
	if retry.Header().Get("Idempotent-Replayed") == "true" {
		t.Errorf("the failure was stored as %d and replayed", retry.Code)
	}
	if n := adaptertest.Transfers(t, db); n != 0 {
		t.Errorf("%d transfers of a failed handler committed, want 0", n)
	}
}

// Without any error middleware: a gin handler that returns without
// writing gave no answer (docs/semantics.md §3.4): 500 handler-failed,
// nothing stored, the transaction rolled back.
func TestNoAnswerIsNeverStored(t *testing.T) {
	e, db := adaptertest.Engine(t)
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(authenticate, idemgin.Middleware(e))
	g.POST("/transfers", func(c *gin.Context) {
		tx, err := idem.TxFor[*sqlitestore.Tx](c, adaptertest.Op)
		if err != nil {
			return
		}
		_, _ = tx.ExecContext(c, `INSERT INTO transfers (amount) VALUES (1)`)
	})
	first := adaptertest.Post(g, "k1", `{}`)
	retry := adaptertest.Post(g, "k1", `{}`)
	t.Logf("first %d %q; retry %d replayed=%q; transfers %d", first.Code, first.Body, retry.Code,
		retry.Header().Get("Idempotent-Replayed"), adaptertest.Transfers(t, db))
	if first.Code != http.StatusInternalServerError || retry.Header().Get("Idempotent-Replayed") == "true" {
		t.Errorf("no answer: first %d, retry replayed=%q; want 500 handler-failed and nothing stored",
			first.Code, retry.Header().Get("Idempotent-Replayed"))
	}
	if n := adaptertest.Transfers(t, db); n != 0 {
		t.Errorf("%d transfers committed by a handler that gave no answer, want 0", n)
	}
}

// Error middleware Use'd after idemgin.Middleware renders inside the
// engine: its answer is the key's, stored and replayed (a 4xx; a 5xx is
// never stored).
func TestErrorMiddlewareBehindTheEngineIsTheAnswer(t *testing.T) {
	e, _ := adaptertest.Engine(t)
	var runs atomic.Int64
	g := gin.New()
	g.ContextWithFallback = true
	declined := func(c *gin.Context) {
		c.Next()
		if err := c.Errors.Last(); err != nil {
			c.JSON(http.StatusPaymentRequired, gin.H{"error": err.Error()})
		}
	}
	g.Use(authenticate, idemgin.Middleware(e), declined)
	g.POST("/transfers", func(c *gin.Context) {
		runs.Add(1)
		_ = c.Error(errors.New("card declined"))
	})
	first := adaptertest.Post(g, "k1", `{}`)
	retry := adaptertest.Post(g, "k1", `{}`)
	if first.Code != http.StatusPaymentRequired || retry.Header().Get("Idempotent-Replayed") != "true" || retry.Body.String() != first.Body.String() {
		t.Fatalf("first %d %q; retry %d replayed=%q %q; want the middleware's 402 stored and replayed",
			first.Code, first.Body, retry.Code, retry.Header().Get("Idempotent-Replayed"), retry.Body)
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs, want 1", runs.Load())
	}
}
