package pgstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A claim that gets its request's advisory lock but not the key's cannot
// tell from the locks alone whom the key's holder serves: PostgreSQL frees
// a backend's locks one at a time (at the end of a transaction, in
// pg_advisory_unlock_all, when a backend dies), so a holder of this very
// request can be seen for a moment holding the key's lock without the
// request's. The store must then look at what the holder still holds:
// only a holder with another request's lock makes the claim a different
// request's (docs/semantics.md §5.1, 422); one that holds the key's lock
// alone is being given back, and the claim is in flight (409), never
// "another request", which would tell the client to change its key.
func TestClaimMeetsAKeyLockWithoutItsRequest(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	other := sha256.Sum256([]byte(`{"amount":999}`))

	cases := []struct {
		name string
		// holds returns the lock ids the other session holds, from the
		// key's lock id and another request's.
		holds func(keyLock, otherRequest int64) []int64
		// another is whether the claim must be read as another request's.
		another bool
	}{
		{"the key's lock alone, as while it is given back", func(k, _ int64) []int64 { return []int64{k} }, false},
		{"the key's lock and another request's", func(k, o int64) []int64 { return []int64{k, o} }, true},
	}
	for _, tc := range cases {
		for _, tx := range []bool{false, true} {
			name := tc.name
			if tx {
				name += ", transactional claim"
			}
			t.Run(name, func(t *testing.T) {
				c := claimFor("lock-"+randomHex(4), "tok", time.Minute)
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
				for _, id := range tc.holds(keyLock, otherRequest) {
					if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, id); err != nil {
						t.Fatal(err)
					}
				}
				defer func() {
					if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
						t.Error(err)
					}
				}()

				var res idemstore.Result
				if tx {
					var h idemstore.Tx
					res, h, err = s.ClaimTx(ctx, c)
					if h != nil {
						_ = h.Release(ctx)
					}
				} else {
					res, err = s.Claim(ctx, c)
				}
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
