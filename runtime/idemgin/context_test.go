package idemgin_test

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
)

// bufferWriter is a gin.ResponseWriter that keeps what is written, as a
// timeout's writer keeps the chain's answer.
type bufferWriter struct{ rec *httptest.ResponseRecorder }

var _ gin.ResponseWriter = bufferWriter{}

func (b bufferWriter) Header() http.Header               { return b.rec.Header() }
func (b bufferWriter) Write(p []byte) (int, error)       { return b.rec.Write(p) }
func (b bufferWriter) WriteString(s string) (int, error) { return b.rec.WriteString(s) }
func (b bufferWriter) WriteHeader(code int)              { b.rec.WriteHeader(code) }
func (b bufferWriter) WriteHeaderNow()                   {}
func (b bufferWriter) Written() bool                     { return b.rec.Body.Len() > 0 }
func (b bufferWriter) Status() int                       { return b.rec.Code }
func (b bufferWriter) Size() int                         { return b.rec.Body.Len() }
func (b bufferWriter) Flush()                            {}
func (b bufferWriter) CloseNotify() <-chan bool          { return nil }
func (b bufferWriter) Pusher() http.Pusher               { return nil }
func (b bufferWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("no")
}

// Middleware in front that answers and returns while the chain still runs
// (a timeout that runs the chain on the request's own *gin.Context) lets
// gin serve the next request with the Context the running handler holds.
// That request is answered 500 and runs nothing, so the running handler's
// writes through the Context never reach an answer the engine stores under
// another request's key and tenant.
func TestGinContextOfARunningHandlerRunsNothing(t *testing.T) {
	engine := adaptertest.TenantEngine(t)
	var (
		mu      sync.Mutex
		aCtx    *gin.Context // the Context tenant a's handler runs with
		started = make(chan struct{})
		write   = make(chan struct{}) // tenant a's handler is to write
		release = make(chan struct{}) // tenant a's handler is to return
		wrote   = make(chan struct{})
		aDone   = make(chan struct{})
		bDone   = make(chan struct{}, 1)
		once    sync.Once
	)
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(func(c *gin.Context) {
		if c.GetHeader("X-Tenant") != "a" {
			c.Next()
			bDone <- struct{}{}
			return
		}
		mu.Lock()
		aCtx = c
		mu.Unlock()
		orig := c.Writer
		c.Writer = bufferWriter{httptest.NewRecorder()} // the chain writes here
		go func() {
			defer close(aDone)
			c.Next()
		}()
		<-started // answer once the handler runs, and return
		orig.WriteHeader(http.StatusServiceUnavailable)
		orig.WriteHeaderNow()
		c.Abort()
	}, idemgin.Middleware(engine))
	g.POST("/transfers", func(c *gin.Context) {
		tenant := c.GetHeader("X-Tenant")
		if tenant == "a" {
			close(started)
			select {
			case <-write:
				c.JSON(http.StatusCreated, gin.H{"tenant": "a", "card": "4242-a-secret"})
				close(wrote)
			case <-release:
			}
			return
		}
		mu.Lock()
		shared := c == aCtx
		mu.Unlock()
		if shared { // let tenant a's handler write first
			close(write)
			<-wrote
		}
		c.JSON(http.StatusCreated, gin.H{"tenant": tenant})
	})
	srv := httptest.NewServer(g)
	defer srv.Close()
	defer func() { once.Do(func() { close(release) }); <-aDone }()

	if status, _ := adaptertest.TenantPost(t, srv, "a", "a-1"); status != http.StatusServiceUnavailable {
		t.Fatalf("tenant a: %d, want the 503 of the middleware in front", status)
	}
	adaptertest.RefusedWithAnothersContext(t, srv, func() { <-bDone })
}
