package pgstore_test

import (
	"context"
	"database/sql/driver"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// heldValue is an argument whose value is given when open is closed,
// after it has said so on reached.
type heldValue struct {
	value         string
	reached, open chan struct{}
}

func (v heldValue) Value() (driver.Value, error) {
	close(v.reached)
	<-v.open
	return v.value, nil
}

// onWarn is a slog.Handler that runs f on the first record whose message
// contains substr, before it returns from Handle: a logger that writes
// somewhere slow takes as long.
type onWarn struct {
	substr string
	f      func()
}

func (h *onWarn) Enabled(context.Context, slog.Level) bool { return true }
func (h *onWarn) Handle(_ context.Context, r slog.Record) error {
	if h.f != nil && strings.Contains(r.Message, h.substr) {
		f := h.f
		h.f = nil
		f()
	}
	return nil
}
func (h *onWarn) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *onWarn) WithGroup(string) slog.Handler      { return h }

// A call of the handler's in flight when its transaction ends costs the
// connection (inflight.go), but the connection is closed only after the
// end's statements have run and the WARN line has been logged: a call
// whose argument gives its value in that window sends its statement on
// the connection after the COMMIT, in autocommit, where no check of the
// transaction's end sees it. Here it deletes another tenant's completed
// key, and that tenant's completed request runs again. The logger is
// where the window is widened to be hit every time; any delay between the
// end's last statement and the close (a slow log sink, a descheduled
// goroutine) opens the same one.
func TestACallInFlightSendsAfterTheCommitBeforeTheClose(t *testing.T) {
	ctx := context.Background()
	held := heldValue{value: "globex", reached: make(chan struct{}), open: make(chan struct{})}
	lateDone := make(chan error, 1)
	logged := &onWarn{substr: "still running", f: func() {
		close(held.open)
		<-lateDone // the late statement has run (or failed) by now
		lateDone <- nil
	}}
	pool := openPool(t, newSchema(t))
	s := pgstore.New(pool, pgstore.WithLogger(slog.New(logged)))

	globex := tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, `INSERT INTO effects (marker) VALUES ('globex-charge')`) {
		t.Fatal("globex's first claim lost")
	}

	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	h := tx.Driver().(pgx.Tx)
	var lateErr error
	go func() {
		_, err := h.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant = $1`, pgx.QueryExecModeSimpleProtocol, held)
		lateErr = err
		lateDone <- err
	}()
	<-held.reached
	mcommit := tx.Commit(ctx, idemstore.Response{Status: 201})
	select {
	case <-lateDone:
	case <-time.After(10 * time.Second):
		close(held.open)
		t.Fatal("the WARN line was never logged")
	}
	t.Logf("acme's Commit: %v; its late statement: %v", mcommit, lateErr)

	retry := globex
	retry.Token = "tok-globex-retry"
	won := runCharge(t, s, retry, `INSERT INTO effects (marker) VALUES ('globex-charge')`)
	if n, err := countEffects(ctx, pool, "globex-charge"); err != nil || n > 1 {
		t.Fatalf("globex's completed request ran again (%d charges, %v; retry won: %v): acme's statement, in flight at its transaction's end, ran after the COMMIT (%v) and deleted globex's key",
			n, err, won, lateErr)
	}
}
