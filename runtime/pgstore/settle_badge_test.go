package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// A claim that meets its key's lock held by a session that wears another
// request's badge is told "another request" (a 422, which tells the client
// to change its key) only when that badge is of a request of this same
// key (docs/semantics.md §5.1). A hostile handler of one tenant takes
// another tenant's key's lock (idempotency_lock_id, which it can call)
// from the transaction of its own request, whose badge its session wears:
// that tenant's first request of the key, which no other request holds, is
// answered as in flight (a 409 whose retry gets the key once the handler
// lets go), not as reused.
func TestAnotherKeysRequestHoldingTheKeysLockIsNotAnotherRequestOfTheKey(t *testing.T) {
	for _, tx := range []bool{false, true} {
		name := "plain claim"
		if tx {
			name = "transactional claim"
		}
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			ctx := context.Background()

			victimKey := "victim-" + randomHex(4)
			victim := tenantClaim("globex", victimKey, "tok-victim")

			// acme's request runs its handler; the handler reaches for
			// globex's key.
			attacker := wonClaimTx(t, s, tenantClaim("acme", "a-"+randomHex(4), "tok-acme"))
			defer func() { _ = attacker.Rollback(ctx) }()
			h := attacker.Driver().(pgx.Tx)
			if _, err := h.Exec(ctx, `SELECT pg_advisory_lock(idempotency_lock_id($1, $2, $3))`,
				victim.Tenant, victim.Scope, victim.Key); err != nil {
				t.Fatalf("handler's lock: %v", err)
			}

			// globex's first request of its key, while acme's handler runs.
			res, err := claimOnce(ctx, s, victim, tx)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case res.Won:
				t.Fatalf("globex's claim of %s won while acme's handler holds its lock", victimKey)
			case res.Existing.State != idemstore.StateInFlight:
				t.Fatalf("globex's claim of %s met %s, want in flight", victimKey, res.Existing.State)
			case string(res.Existing.Fingerprint) != string(victim.Fingerprint) || res.Existing.Operation != victim.Operation:
				t.Fatalf("globex's first claim of %s was answered as held by another request (a 422): %+v; "+
					"acme's handler forged it with an advisory lock", victimKey, res.Existing)
			}

			// Once acme's request ends, the key is globex's.
			if err := attacker.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if res, err := claimOnce(ctx, s, victim, tx); err != nil || !res.Won {
				t.Errorf("globex's retry of %s after acme's request ended = %+v, %v; want won", victimKey, res, err)
			}
		})
	}
}
