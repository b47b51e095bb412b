package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// SessionState is something a handler can leave on its database session
// besides its writes: a temporary table, a setting, a prepared statement,
// an attached database. A store that pools its sessions must give each
// request one on which no earlier handler left anything; RunTx checks that
// with each SessionState of txStore.Session.
type SessionState struct {
	// Name says what the state is, in messages.
	Name string
	// Leave leaves the state through tx, the value the store's Tx.Driver
	// returned, as a handler could. A store may refuse it (an error): then
	// nothing must be left.
	Leave func(ctx context.Context, tx any) error
	// Probe reads, through tx, what a handler sees of the state. On a
	// session where it was never left it answers the same as on a fresh
	// one; after Leave, in the same transaction, it must answer something
	// else. An error counts as one answer, whatever its text, so that
	// Probe may read a table that is absent on a fresh session.
	Probe func(ctx context.Context, tx any) (string, error)
	// AtCommit: the state takes hold only when the handler's transaction
	// commits (PostgreSQL's LISTEN), so Probe in that transaction cannot
	// tell it from a fresh session, and RunTx does not ask it to. The
	// mutation run shows that the check can fail.
	AtCommit bool
}

// probe runs st.Probe and turns its answer into one value to compare.
func (st SessionState) probe(ctx context.Context, tx any) string {
	v, err := st.Probe(ctx, tx)
	if err != nil {
		return "(an error)"
	}
	return fmt.Sprintf("%q", v)
}

// sessionEnd is one way a handler's transaction comes to be and ends:
// claimed or keyless, committed (a stored answer) or rolled back (an
// answer that is not stored, a panic).
type sessionEnd struct {
	name   string
	keyed  bool
	commit bool
}

var sessionEnds = []sessionEnd{
	{"ClaimTx+Commit", true, true},
	{"ClaimTx+Release", true, false},
	{"Begin+Commit", false, true},
	{"Begin+Release", false, false},
}

// begin opens the transaction of e; key names its claim.
func (e sessionEnd) begin(t *testing.T, s txStore, key string) idemstore.Tx {
	t.Helper()
	if e.keyed {
		return mustClaimTx(t, s, newRequest(key).claim())
	}
	tx, err := s.Store.Begin(context.Background(), longLease)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx
}

// end ends tx as e does.
func (e sessionEnd) end(tx idemstore.Tx) error {
	if e.commit {
		return tx.Commit(context.Background(), sampleResponse())
	}
	return tx.Rollback(context.Background())
}

// nextRequests is how many requests after a handler's look for what it
// left: a pool hands out the session it got back last, or another one, so
// a few requests in a row meet the handler's session whichever the pool
// prefers.
const nextRequests = 3

// A handler leaves state on its session (txStore.Session) and its
// transaction ends, claimed or keyless, committed or rolled back. No later
// request, whichever pooled session it gets, sees that state: a temporary
// table one tenant's handler filled, or a setting it made, never reaches
// another tenant's request.
func testTxSessionIsNotShared(t *testing.T, s txStore) {
	if len(s.Session) == 0 {
		t.Skip("the store's test names no session state")
	}
	ctx := context.Background()
	look := func(st SessionState) string {
		t.Helper()
		tx, err := s.Store.Begin(ctx, longLease)
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		v := st.probe(ctx, tx.Driver())
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("Release of a probe's transaction: %v", err)
		}
		return v
	}
	for _, st := range s.Session {
		for i, e := range sessionEnds {
			fresh := look(st)
			tx := e.begin(t, s, fmt.Sprintf("session-%s-%d", st.Name, i))
			left := st.Leave(ctx, tx.Driver()) == nil
			if left && !st.AtCommit {
				if v := st.probe(ctx, tx.Driver()); v == fresh {
					_ = e.end(tx)
					t.Fatalf("%s, %s: the handler's own probe answers %s after Leave, as on a fresh session: the case tests nothing", st.Name, e.name, v)
				}
			}
			// A refused Leave may have aborted the transaction
			// (PostgreSQL), whose Commit then fails: not what this case
			// checks.
			if err := e.end(tx); err != nil && left {
				t.Errorf("%s, %s: ending the transaction: %v", st.Name, e.name, err)
			}
			for n := range nextRequests {
				if v := look(st); v != fresh {
					t.Errorf("%s, %s: request %d after the handler's sees %s, a fresh session %s", st.Name, e.name, n+1, v, fresh)
				}
			}
		}
	}
}

// chainedEnds are the statements with which a handler ends its
// transaction and is at once in a new one, so that its connection never
// looks idle.
var chainedEnds = []string{
	"COMMIT AND CHAIN",
	"ROLLBACK AND CHAIN",
	"COMMIT; BEGIN",
	"ROLLBACK; BEGIN",
}

// A handler ends its transaction and is at once in a new one (COMMIT AND
// CHAIN, or COMMIT; BEGIN in one statement string), writing before and
// after. Its first writes may have committed on their own, the lease's
// bounds on the transaction are gone, and the transaction the store ends
// is not the one it began: whether the handler's answer is stored (Commit)
// or not (Release), the store must report idemstore.ErrOutcomeUnknown and never
// free the key, claimed or keyless. A store may refuse the statement
// instead (wantRefused).
func testTxHandlerChainsTx(t *testing.T, s txStore) {
	if s.Exec == nil {
		t.Skip("the store's test gives no Exec")
	}
	ctx := context.Background()
	for _, stmt := range chainedEnds {
		for i, e := range sessionEnds {
			marker := fmt.Sprintf("chain-%d-%s", i, stmt)
			r := newRequest(marker)
			var tx idemstore.Tx
			if e.keyed {
				tx = mustClaimTx(t, s, r.claim())
			} else {
				tx = e.begin(t, s, "")
			}
			mustWrite(t, s, tx, marker)
			if err := s.Exec(ctx, tx.Driver(), stmt); err != nil {
				// Refused: the transaction is the store's still, or
				// rolled back for the refused statement.
				writeAfterRefusal(s, tx, marker)
				wantRefused(t, s, e.end(tx), e.commit, stmt, marker)
				continue
			}
			mustWrite(t, s, tx, marker)
			if err := e.end(tx); !errors.Is(err, idemstore.ErrOutcomeUnknown) {
				t.Errorf("%s, %s: ending the transaction after the handler's %q = %v, want idemstore.ErrOutcomeUnknown", stmt, e.name, stmt, err)
			}
			if e.keyed {
				mustLose(t, s.Store, r.claimWith(idemstore.Takeover), idemstore.StateIndeterminate)
			}
		}
	}
}
