package idemgin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
)

// The recommended timeout, a deadline on the request's context in front
// of Middleware, keeps each *gin.Context with its request until the
// handler has returned: a handler that answers past its deadline answers
// its own client, its answer is what its retry replays, and another
// tenant's requests meanwhile get their own answers. CheckRoutes passes.
func TestGinContextDeadlineKeepsAnswersApart(t *testing.T) {
	engine := adaptertest.TenantEngine(t)
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 200*time.Millisecond)
		defer cancel()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}, idemgin.Middleware(engine))
	g.POST("/transfers", func(c *gin.Context) {
		tenant := c.GetHeader("X-Tenant")
		if tenant == "acme" {
			<-c.Request.Context().Done() // past its deadline, and answers anyway
		}
		c.JSON(http.StatusCreated, gin.H{"tenant": tenant, "card": "4242-" + tenant + "-secret"})
	})
	if err := idemgin.CheckRoutes(engine, g); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	adaptertest.AnswersStayApart(t, srv, "acme", "globex")
}
