package pgstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A claim that gets its request's advisory lock but not the key's cannot
// tell from the locks alone whom the key's holder serves: PostgreSQL frees
// a backend's locks one at a time (at the end of a transaction, in
// pg_advisory_unlock_all, when a backend dies), so a holder of this very
// request can be seen for a moment holding the key's lock without the
// request's. The store must then look at what the holder still holds:
// only a holder with another request's badge makes the claim a different
// request's (docs/semantics.md §5.1, 422); one that holds the key's lock
// alone, or beside a lock of the application's own, is being given back,
// and the claim is in flight (409), never "another request", which would
// tell the client to change its key (docs/semantics.md §3.5).
func TestClaimMeetsAKeyLockWithoutItsRequest(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	other := sha256.Sum256([]byte(`{"amount":999}`))

	cases := []struct {
		name string
		// holds returns what the other session runs to hold its locks,
		// from the key's lock id, another request's, this request and
		// the other.
		holds func(keyLock, otherRequest int64, mine, theirs idemstore.Claim) []string
		// another is whether the claim must be read as another request's.
		another bool
	}{
		{"the key's lock alone, as while it is given back", func(k, _ int64, _, _ idemstore.Claim) []string {
			return []string{lockSQL(k)}
		}, false},
		{"the key's lock and an application's", func(k, _ int64, _, _ idemstore.Claim) []string {
			return []string{lockSQL(k), lockSQL(4242)}
		}, false},
		{"the key's lock and another request's", func(k, r int64, _, o idemstore.Claim) []string {
			return []string{lockSQL(k), lockSQL(r), badgeSQL(o)}
		}, true},
		{"the key's lock and another request's badge, its request lock already free", func(k, _ int64, _, o idemstore.Claim) []string {
			return []string{lockSQL(k), badgeSQL(o)}
		}, true},
		{"the key's lock and this request's badge, as while it is given back", func(k, _ int64, c, _ idemstore.Claim) []string {
			return []string{lockSQL(k), badgeSQL(c)}
		}, false},
	}
	for _, tc := range cases {
		for _, tx := range []bool{false, true} {
			name := tc.name
			if tx {
				name += ", transactional claim"
			}
			t.Run(name, func(t *testing.T) {
				c := claimFor("lock-"+randomHex(4), "tok", time.Minute)
				o := c
				o.Fingerprint = other[:]
				var keyLock, otherRequest int64
				if err := pool.QueryRow(ctx, `SELECT idempotency_lock_id($1, $2, $3),
					idempotency_request_lock_id($1, $2, $3, $4, $5)`,
					c.Tenant, c.Scope, c.Key, c.Operation, other[:]).Scan(&keyLock, &otherRequest); err != nil {
					t.Fatal(err)
				}
				holder, err := pool.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Release()
				for _, stmt := range tc.holds(keyLock, otherRequest, c, o) {
					if _, err := holder.Exec(ctx, stmt); err != nil {
						t.Fatalf("%s: %v", stmt, err)
					}
				}
				defer func() {
					if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
						t.Error(err)
					}
				}()
				res, err := claimOnce(ctx, s, c, tx)
				if err != nil {
					t.Fatal(err)
				}
				if res.Won || res.Existing.State != idemstore.StateInFlight {
					t.Fatalf("claim = %+v, want the key in flight", res)
				}
				same := res.Existing.Operation == c.Operation && bytes.Equal(res.Existing.Fingerprint, c.Fingerprint)
				if same == tc.another {
					t.Errorf("claim read the holder as the same request: %v, want %v (record %+v)", same, !tc.another, res.Existing)
				}
			})
		}
	}
}

// lockSQL takes the session-level advisory lock id.
func lockSQL(id int64) string { return fmt.Sprintf("SELECT pg_advisory_lock(%d)", id) }

// badgeSQL takes, at session level, the badge of c's request that a
// transactional claim holds for as long as its transaction.
func badgeSQL(c idemstore.Claim) string {
	class, id := pgstore.RequestBadge(c)
	return fmt.Sprintf("SELECT pg_advisory_lock_shared(%d, %d)", class, id)
}

// claimOnce claims c, in a transaction when tx is set (and gives the
// transaction back at once), and returns the answer.
func claimOnce(ctx context.Context, s *pgstore.Store, c idemstore.Claim, tx bool) (idemstore.Result, error) {
	if !tx {
		return s.Claim(ctx, c)
	}
	res, h, err := s.ClaimTx(ctx, c)
	if h != nil {
		_ = h.Rollback(ctx)
	}
	return res, err
}

// A request whose key another request holds in a transaction is told so
// (422) while the holder runs, whatever advisory locks the holder's
// handler takes of its own; the holder wears its own request's badge.
func TestClaimMeetsAnotherRequestsTransaction(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	for _, tx := range []bool{false, true} {
		for _, appLock := range []bool{false, true} {
			t.Run(fmt.Sprintf("transactional %v, application lock %v", tx, appLock), func(t *testing.T) {
				key := "held-" + randomHex(4)
				holder := wonTx(t, s, key, "tok-holder")
				defer func() { _ = holder.Rollback(ctx) }()
				class, badge := pgstore.RequestBadge(claimFor(key, "", time.Minute))
				var worn int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
					WHERE locktype = 'advisory' AND granted AND objsubid = 2
					  AND classid = $1::bigint::oid AND objid = $2::bigint::oid`,
					int64(class), int64(badge)).Scan(&worn); err != nil || worn != 1 {
					t.Fatalf("sessions wearing the holder's badge = %d, %v; want 1", worn, err)
				}
				if appLock {
					if _, err := holder.Driver().(pgx.Tx).Exec(ctx, "SELECT pg_advisory_lock(4242)"); err != nil {
						t.Fatal(err)
					}
				}
				c := claimFor(key, "tok", time.Minute)
				fp := sha256.Sum256([]byte(`{"amount":999}`))
				c.Fingerprint = fp[:]
				res, err := claimOnce(ctx, s, c, tx)
				if err != nil {
					t.Fatal(err)
				}
				same := res.Existing.Operation == c.Operation && bytes.Equal(res.Existing.Fingerprint, c.Fingerprint)
				if res.Won || res.Existing.State != idemstore.StateInFlight || same {
					t.Fatalf("claim = %+v, want the key in flight for another request", res)
				}
			})
		}
	}
}

// When the key's row is visible by the time the claim is settled, the row
// decides, as it decides every other claim: a replay, a 409 with the
// lease left, a 422 for another request. An abandoned claim of this
// request, which only a claim holding the key's lock may settle, is in
// flight for now, and so is a key with no live row and no holder.
func TestSettleReadsAVisibleRow(t *testing.T) {
	_, pool := newStore(t)
	ctx := context.Background()
	other := sha256.Sum256([]byte(`{"amount":999}`))
	setup := `INSERT INTO idempotency_keys
	  (tenant, scope, key, operation, fingerprint, state, lease_token, lease_until, expires_at, status, body)
	VALUES
	  ('t1', 'createTransfer', 'done',      'createTransfer', $1, 'completed', NULL,  NULL,                        now() + interval '1 hour', 201, 'stored'),
	  ('t1', 'createTransfer', 'running',   'createTransfer', $1, 'in_flight', 'old', now() + interval '1 minute', now() + interval '1 hour', NULL, NULL),
	  ('t1', 'createTransfer', 'abandoned', 'createTransfer', $1, 'in_flight', 'old', now() - interval '1 second', now() + interval '1 hour', NULL, NULL),
	  ('t1', 'createTransfer', 'theirs',    'createTransfer', $2, 'in_flight', 'old', now() + interval '1 minute', now() + interval '1 hour', NULL, NULL),
	  ('t1', 'createTransfer', 'expired',   'createTransfer', $2, 'completed', NULL,  NULL,                        now() - interval '1 second', 201, 'old')`
	mine := claimFor("", "tok", time.Minute).Fingerprint
	if _, err := pool.Exec(ctx, setup, mine, other[:]); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		key    string
		state  idemstore.State
		same   bool
		replay string
		leased bool
	}{
		{"done", idemstore.StateCompleted, true, "stored", false},
		{"running", idemstore.StateInFlight, true, "", true},
		{"abandoned", idemstore.StateInFlight, true, "", false},
		{"theirs", idemstore.StateInFlight, false, "", true},
		{"expired", idemstore.StateInFlight, true, "", false},
	}
	for _, tc := range cases {
		c := claimFor(tc.key, "tok", time.Minute)
		res, err := pgstore.Settle(ctx, pool, c)
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		rec := res.Existing
		same := rec.Operation == c.Operation && bytes.Equal(rec.Fingerprint, c.Fingerprint)
		if res.Won || rec.State != tc.state || same != tc.same || (rec.LeaseRemaining > 0) != tc.leased {
			t.Errorf("%s: settled as %+v, want state %s, same request %v, lease left %v", tc.key, rec, tc.state, tc.same, tc.leased)
		}
		if tc.replay != "" && (rec.Response == nil || string(rec.Response.Body) != tc.replay || rec.Response.Status != 201) {
			t.Errorf("%s: settled with response %+v, want the stored 201 %q", tc.key, rec.Response, tc.replay)
		}
	}
}
