package sqlitestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// frameworkCtx is a web framework's context, as gin's *gin.Context is: a
// type the context package does not know, which ends with the request it
// wraps, and which the framework points at the next request once the
// handler returns.
type frameworkCtx struct{ req context.Context }

func (f *frameworkCtx) Deadline() (time.Time, bool) { return f.req.Deadline() }
func (f *frameworkCtx) Done() <-chan struct{}       { return f.req.Done() }
func (f *frameworkCtx) Err() error                  { return f.req.Err() }
func (f *frameworkCtx) Value(any) any               { return nil }

// A handler passes its framework's context to the transaction's calls. The
// store reads it during the call only: once the transaction has ended and
// the handler returned, the framework reuses it for the next request, and
// a read of it then, from a goroutine of the store's, is a data race that
// the race detector reports here.
func TestAFrameworksContextIsNotReadOnceTheTransactionEnded(t *testing.T) {
	s := openStore(t)
	for i := range 20 {
		req, cancel := context.WithCancel(context.Background())
		f := &frameworkCtx{req: req}
		key := "k" + string(rune('a'+i))
		res, tx, err := s.ClaimTx(context.Background(), ownerClaim(key, "tok-"+key, idemstore.Takeover))
		if err != nil || !res.Won {
			t.Fatalf("ClaimTx = %+v, %v", res, err)
		}
		h := tx.Driver().(*sqlitestore.Tx)
		var n int
		if err := h.QueryRowContext(f, `SELECT 1`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background(), idemstore.Response{Status: 201}); err != nil {
			t.Fatal(err)
		}
		// The framework's next request.
		f.req = context.Background()
		cancel()
	}
}

// The framework's context still ends the statement it was passed to: a
// cancelled request interrupts it, and a request's deadline does too,
// reported as the deadline.
func TestAFrameworksContextEndsItsStatement(t *testing.T) {
	s := openStore(t)
	if _, err := s.DB().Exec(`CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		req  func(t *testing.T) context.Context
		want error
	}{
		{"cancelled", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx
		}, context.Canceled},
		{"past its deadline", func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
		{"cancelled before", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, tx, err := s.ClaimTx(context.Background(), ownerClaim(c.name, "tok", idemstore.Takeover))
			if err != nil || !res.Won {
				t.Fatalf("ClaimTx = %+v, %v", res, err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			h := tx.Driver().(*sqlitestore.Tx)
			start := time.Now()
			_, err = h.ExecContext(&frameworkCtx{req: c.req(t)}, slowInsert)
			t.Logf("%v after %v", err, time.Since(start))
			if !errors.Is(err, c.want) {
				t.Fatalf("the statement ended with %v, want it interrupted with %v", err, c.want)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("interrupted after %v, want soon after the request ended", time.Since(start))
			}
		})
	}
}
