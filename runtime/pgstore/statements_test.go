package pgstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// statementLog records the statements a pool's connections send, read from
// the PostgreSQL frontend protocol on the socket, so that nothing the
// store sends escapes it (pgx's tracer sees neither pgconn's own Exec nor
// each statement of a pipeline as it is sent): each simple Query message,
// and each Execute of the extended protocol, is one statement. Preparing
// a statement runs nothing and is not counted.
type statementLog struct{ storetest.StatementLog }

// install makes every connection of cfg, the guard's too, log its
// statements.
func (l *statementLog) install(cfg *pgxpool.Config) {
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: c, log: l, parsed: map[string]string{}, portals: map[string]string{}}, nil
	}
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
}

// wireConn reads the frontend messages written on one connection.
type wireConn struct {
	net.Conn
	log     *statementLog
	started bool              // the startup message, which has no type byte, has gone
	pending []byte            // the start of a message not yet written whole
	parsed  map[string]string // prepared statement name → its text
	portals map[string]string // portal name → the text of the statement bound to it
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.pending = append(c.pending, p...)
	for {
		if !c.started {
			if len(c.pending) < 4 {
				break
			}
			n := int(binary.BigEndian.Uint32(c.pending))
			if len(c.pending) < n {
				break
			}
			c.pending, c.started = c.pending[n:], true
			continue
		}
		if len(c.pending) < 5 {
			break
		}
		n := 1 + int(binary.BigEndian.Uint32(c.pending[1:]))
		if len(c.pending) < n {
			break
		}
		c.message(c.pending[0], c.pending[5:n])
		c.pending = c.pending[n:]
	}
	c.pending = append([]byte(nil), c.pending...)
	return c.Conn.Write(p)
}

// message reads one frontend message of type typ.
func (c *wireConn) message(typ byte, body []byte) {
	fields := bytes.SplitN(body, []byte{0}, 3)
	str := func(i int) string {
		if i < len(fields) {
			return string(fields[i])
		}
		return ""
	}
	switch typ {
	case 'Q': // Query: its text
		c.log.Add(str(0))
	case 'P': // Parse: statement name, text
		c.parsed[str(0)] = str(1)
	case 'B': // Bind: portal name, statement name
		c.portals[str(0)] = c.parsed[str(1)]
	case 'E': // Execute: portal name
		c.log.Add(c.portals[str(0)])
	}
}

// docs/semantics.md §6: what each request costs the database, path by
// path, in statements, whichever way the store sends them (pgx, a
// pipeline, pgconn). Each wanted statement is the start of its text.
func TestStatementsPerRequest(t *testing.T) {
	var log statementLog
	// A database of the test's own, where no other test's schema has the
	// transactional end take the full reset (quietDatabase).
	db := quietDatabase(t)
	pool := openPoolIn(t, db, newSchemaIn(t, db), func(c *pgxpool.Config) {
		c.MaxConns = 4
		log.install(c)
	})
	s := pgstore.New(pool)
	pgstore.SetGuardIdleClose(s, time.Hour)
	paths := enginetest.RequestPaths(t, s, func(ctx context.Context, tx pgx.Tx, marker string) error {
		_, err := tx.Exec(ctx, "INSERT INTO effects (marker) VALUES ($1)", marker)
		return err
	})
	// The claim: a primary-key read that calls idempotency_claim when no
	// row decides the claim (for a new key, it inserts the key). It
	// compares fingerprints in Go.
	const claim = "SELECT k.state, k.operation"
	// A transactional claim first reads the row that decides it by
	// itself, outside a transaction (the same columns as the claim, no
	// call of idempotency_claim): a completed key is answered by it alone.
	const peek = "SELECT k.state, k.operation, k.fingerprint, k.lease_until, t.now, k.status, k.headers, k.body, k.body_omitted FROM"
	// A transaction's start: BEGIN and the lease's statement timeouts,
	// pipelined with the claim, which calls idempotency_claim without the
	// read (the peek made it).
	begin := []string{"begin isolation level read committed", "SELECT pg_catalog.set_config('idle_in_transaction_session_timeout'", "SELECT idempotency_claim("}
	want := map[string]struct {
		stmts []string
		// guard is how many of the guard's statements the request causes,
		// on the guard's own connection; they travel beside the store's,
		// in no fixed order with them.
		guard int
	}{
		// The claim, and the completion fenced by the claim's token.
		"new key": {[]string{claim, "UPDATE ONLY idempotency_keys SET"}, 0},
		"replay":  {[]string{claim}, 0},
		"conflict: another request with the key (422)": {[]string{claim}, 0},
		"conflict: the key in flight (409)":            {[]string{claim}, 0},
		"transactional new key": {append([]string{peek}, append(slices.Clone(begin),
			// The handler's own write, in the request's transaction.
			"INSERT INTO effects",
			// In one batch: the cursors closed and the deferred triggers
			// fired, so that nothing of the handler's runs at COMMIT; the
			// completion, which also checks that the transaction is still
			// the claim's; the transaction made read-only; COMMIT, and the
			// reset before the
			// connection goes back to the pool: the check of what a handler
			// may have left on the session, which also releases the claim's
			// session locks and seeds random() afresh (sessionCheckSQL),
			// then RESET ALL and DISCARD
			// SEQUENCES (leanResetSQL), and the test, parsed afresh, that no
			// statement the batch ran was the handler's (replacedSQL). This
			// handler leaves nothing else, so the full reset (resetSQL) is
			// not sent.
			"CLOSE ALL", "SET CONSTRAINTS ALL IMMEDIATE",
			"WITH u AS ( UPDATE ONLY idempotency_keys SET state = 'completed'",
			"SET TRANSACTION READ ONLY", "COMMIT",
			"SELECT pg_catalog.pg_advisory_unlock_all(),", "RESET ALL", "DISCARD SEQUENCES",
			"SELECT COALESCE(pg_catalog.bool_or(from_sql AND")...),
			2}, // the key's guard, taken beside the claim's batch and let go after the commit
		// The read of the completed row answers: no transaction, no guard.
		"transactional replay": {[]string{peek}, 0},
		// The held request's row is not visible: the read finds nothing,
		// the claim meets the key's lock, and COMMIT ends the transaction
		// that holds nothing; behind it, in the same round trip, the look
		// for a holder past its lease. The held request holds the guard
		// in this process, which tells the claim without asking the
		// database.
		"transactional conflict: the key in flight (409)": {append([]string{peek}, append(slices.Clone(begin), "COMMIT", "SELECT a.pid, a.state,")...), 0},
	}
	for _, p := range paths {
		var got []string
		p.Send(func(request func()) {
			quiet(t, s)
			before := log.Len()
			request()
			quiet(t, s)
			got = log.Since(before)
		})
		got, guard := apart(got, guardSQLStart)
		w := want[p.Name]
		if guard != w.guard {
			t.Errorf("%s: %d statements of the guard, want %d", p.Name, guard, w.guard)
		}
		storetest.CheckStatements(t, p.Name, got, w.stmts)
	}
}

// docs/semantics.md §6 and §7.2: pgstore has each connection's session
// compile idempotency_claim by a call of its own before the first
// handler's transaction on it, once per connection. A claim's transaction
// has it compiled by its claim, which reads the function's version as it
// begins, in the statements it sends anyway: a connection's first claim
// costs the statements of every later one (TestStatementsPerRequest's
// transactional 409 runs on a connection of its own). A keyless
// transaction's beginning calls no claim: the first on a connection that
// no claim's transaction marked is preceded by BEGIN, a claim of a key of
// no tenant and ROLLBACK, and no later one is.
func TestStatementsOfTheCompiledClaim(t *testing.T) {
	ctx := context.Background()
	begin := []string{"begin isolation level read committed", "SELECT pg_catalog.set_config('idle_in_transaction_session_timeout'"}
	compile := []string{"begin isolation level read committed", "SELECT v.oid, v.version", "rollback"}
	// newConn is a store of one connection, opened by a plain claim,
	// which calls idempotency_claim too but runs no handler.
	newConn := func() (*pgstore.Store, *statementLog) {
		var log statementLog
		s := pgstore.New(openPool(t, newSchema(t), func(c *pgxpool.Config) {
			c.MaxConns = 1
			log.install(c)
		}))
		pgstore.SetGuardIdleClose(s, time.Hour)
		if res, err := s.Claim(ctx, claimFor("open-"+randomHex(4), "tok", time.Minute)); err != nil || !res.Won {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		return s, &log
	}
	counted := func(s *pgstore.Store, log *statementLog, name string, want []string, step func() idemstore.Tx) {
		t.Helper()
		quiet(t, s)
		before := log.Len()
		tx := step()
		// The guard's statements, and its session's setting as its
		// connection opens on the first claim's transaction, travel on
		// the guard's connection.
		got, _ := apart(log.Since(before), guardSQLStart)
		got, _ = apart(got, "SELECT pg_catalog.set_config('idle_session_timeout'")
		storetest.CheckStatements(t, name, got, want)
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("%s: Rollback: %v", name, err)
		}
	}
	claimTx := func(s *pgstore.Store) func() idemstore.Tx {
		return func() idemstore.Tx {
			t.Helper()
			res, tx, err := s.ClaimTx(ctx, claimFor("k-"+randomHex(4), "tok", time.Minute))
			if err != nil || !res.Won {
				t.Fatalf("ClaimTx = %+v, %v", res, err)
			}
			return tx
		}
	}
	keyless := func(s *pgstore.Store) func() idemstore.Tx {
		return func() idemstore.Tx {
			t.Helper()
			tx, err := s.Begin(ctx, time.Minute)
			if err != nil {
				t.Fatalf("Begin: %v", err)
			}
			return tx
		}
	}
	const peek = "SELECT k.state, k.operation, k.fingerprint"
	claimed := append(append([]string{peek}, begin...), "SELECT idempotency_claim(")

	s, log := newConn()
	counted(s, log, "a connection's first claim's transaction", claimed, claimTx(s))
	counted(s, log, "a keyless transaction after a claim's", begin, keyless(s))
	counted(s, log, "a later claim's transaction", claimed, claimTx(s))

	s, log = newConn()
	counted(s, log, "a connection's first keyless transaction", append(slices.Clone(compile), begin...), keyless(s))
	counted(s, log, "a later keyless transaction", begin, keyless(s))
	counted(s, log, "a claim's transaction after a keyless one", claimed, claimTx(s))
}

// guardSQLStart is how the guard's statement starts.
const guardSQLStart = "SELECT CASE WHEN o.unlock"

// apart returns the statements that do not start with prefix, and how many
// do.
func apart(stmts []string, prefix string) ([]string, int) {
	var rest []string
	n := 0
	for _, s := range stmts {
		if strings.HasPrefix(s, prefix) {
			n++
		} else {
			rest = append(rest, s)
		}
	}
	return rest, n
}

// quiet waits until the guard has nothing to send, so that its statements
// are counted in the step that caused them.
func quiet(t *testing.T, s *pgstore.Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !pgstore.GuardQuiet(s); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the guard did not go quiet")
		}
	}
}
