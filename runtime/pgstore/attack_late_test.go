package pgstore_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// gate is a pgx.QueryRewriter that holds its statement at the door: it
// says when the statement has reached it and lets it through when told.
// pgx calls a call's rewriter after the transaction has checked that it
// is open and before it sends the statement. A driver.Valuer argument
// slow to give its value, or a handler's goroutine descheduled at the
// wrong moment, holds a statement at the same place.
type gate struct {
	reached, open chan struct{}
}

// valueGate is the gate as an argument of the statement (a
// driver.Valuer): pgx asks for an argument's value after the same check,
// while it encodes the statement's arguments.
type valueGate gate

func (g valueGate) Value() (driver.Value, error) {
	close(g.reached)
	<-g.open
	return "globex-charge", nil
}

func (g gate) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, args []any) (string, []any, error) {
	close(g.reached)
	<-g.open
	return sql, args, nil
}

// The handler's pgx.Tx refuses every call once the idempotency layer has
// ended the transaction, so that nothing a handler keeps past its request
// writes on a connection that is back in the pool (docs/runtime.md; the
// handlerTx comment). A call that began before the end is not refused: it
// checked the transaction while it was open, and goes on to send its
// statement on the connection, whoever holds it by then. Here one
// tenant's handler leaves such a statement behind; the next request on
// the connection is another tenant's, and the statement runs inside that
// request's transaction: it deletes globex's write, globex's
// request commits and answers 201, and every retry replays that answer
// while its write is gone. Held in an argument's value instead, the
// statement is bound with whatever pgx last built on the connection (the
// globex's own statement's arguments: pgx.Conn is not safe for use from
// two goroutines, and nothing stops the handler's from using it after
// the pool gave it to another request), fails inside globex's
// transaction, and globex's request fails with it.
func TestAStatementLeftBehindRunsInTheNextTenantsTransaction(t *testing.T) {
	cases := map[string]func(pgx.Tx, gate) error{
		"a rewriter": func(h pgx.Tx, g gate) error {
			_, err := h.Exec(context.Background(), `DELETE FROM effects WHERE marker = 'globex-charge'`, g)
			return err
		},
		"an argument's value": func(h pgx.Tx, g gate) error {
			_, err := h.Exec(context.Background(), `DELETE FROM effects WHERE marker = $1`, valueGate(g))
			return err
		},
		"a query's argument's value, its rows open": func(h pgx.Tx, g gate) error {
			rows, err := h.Query(context.Background(), `DELETE FROM effects WHERE marker = $1 RETURNING marker`, valueGate(g))
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		},
		"a single row's argument's value": func(h pgx.Tx, g gate) error {
			var marker string
			return h.QueryRow(context.Background(), `DELETE FROM effects WHERE marker = $1 RETURNING marker`, valueGate(g)).Scan(&marker)
		},
		"a savepoint's argument's value": func(h pgx.Tx, g gate) error {
			sp, err := h.Begin(context.Background())
			if err != nil {
				return err
			}
			_, err = sp.Exec(context.Background(), `DELETE FROM effects WHERE marker = $1`, valueGate(g))
			return err
		},
	}
	for name, leave := range cases {
		t.Run(name, func(t *testing.T) {
			g := newGate()
			statementLeftBehind(t, g, func(h pgx.Tx) error { return leave(h, g) })
		})
	}
}

// lowriteGate is the gate as a tracer of the pool's, at the start of
// pgx's query for a large object's write: pgx starts the query after the
// transaction's check, where a handler's goroutine can be descheduled.
type lowriteGate gate

func (g lowriteGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "select lowrite") {
		close(g.reached)
		<-g.open
	}
	return ctx
}

func (lowriteGate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// pgx's large objects run their statements through the transaction they
// were made from: the handler's, so that a write of theirs still running
// when the transaction ends is one of the handler's calls too, not one
// that pgx's own transaction object let through before it was closed.
func TestALargeObjectLeftBehindRunsInTheNextTenantsTransaction(t *testing.T) {
	g := newGate()
	statementLeftBehind(t, g, func(h pgx.Tx) error {
		ctx := context.Background()
		lo := h.LargeObjects()
		oid, err := lo.Create(ctx, 0)
		if err != nil {
			return err
		}
		obj, err := lo.Open(ctx, oid, pgx.LargeObjectModeWrite)
		if err != nil {
			return err
		}
		_, err = obj.Write([]byte("globex-charge"))
		return err
	}, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = lowriteGate(g) })
}

func newGate() gate { return gate{reached: make(chan struct{}), open: make(chan struct{})} }

// statementLeftBehind has acme's handler leave a statement held at g, and
// globex's request run on the connection before g lets it through.
func statementLeftBehind(t *testing.T, g gate, leave func(pgx.Tx) error, tweak ...func(*pgxpool.Config)) {
	s, pool := newStore(t, append(tweak, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })...)
	ctx := context.Background()

	acme := claimFor("m1", "tok-acme", time.Minute)
	acme.Tenant = "acme"
	res, tx, err := s.ClaimTx(ctx, acme)
	if err != nil || !res.Won {
		t.Fatalf("acme's ClaimTx = %+v, %v", res, err)
	}
	h := tx.Driver().(pgx.Tx)
	late := make(chan error, 1)
	go func() { late <- leave(h) }()
	select {
	case <-g.reached:
	case err := <-late:
		t.Fatalf("acme's statement ended before it reached the gate: %v", err)
	}
	// The statement in flight as the transaction ends costs acme's
	// request: its key fails closed.
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil && !errors.Is(err, idemstore.ErrOutcomeUnknown) {
		t.Fatalf("acme's Commit: %v", err)
	}

	// The next request on the connection, another tenant's.
	globex := claimFor("v1", "tok-globex", time.Minute)
	globex.Tenant = "globex"
	res, tx, err = s.ClaimTx(ctx, globex)
	if err != nil || !res.Won {
		t.Fatalf("globex's ClaimTx = %+v, %v", res, err)
	}
	if _, err := tx.Driver().(pgx.Tx).Exec(ctx, `INSERT INTO effects (marker) VALUES ('globex-charge')`); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	lateErr := <-late
	commitErr := tx.Commit(ctx, idemstore.Response{Status: 201, Body: []byte(`{"charge":1}`)})
	n, err := countEffects(ctx, pool, "globex-charge")
	if err != nil {
		t.Fatal(err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM idempotency_keys WHERE tenant = 'globex'`).Scan(&state); err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	t.Logf("acme's late statement: %v; globex's Commit: %v; globex's key %q, its write committed %d time(s)", lateErr, commitErr, state, n)
	if lateErr == nil {
		t.Errorf("a statement of acme's handler ran after its request had ended, on a connection the pool had handed to another tenant's request")
	}
	if commitErr != nil {
		t.Errorf("globex's request, which did nothing wrong, could not commit: acme's late statement reached the server inside globex's transaction and aborted it (%v)", lateErr)
	}
	if commitErr == nil && state == string(idemstore.StateCompleted) && n == 0 {
		t.Errorf("globex's request completed and its answer is stored, but its write is gone: acme's statement ran inside globex's transaction")
	}
}
