//go:build mutants

package pgstore_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// refusal-ends-tx is broken where a client sees it: a handler that writes
// on after its refused COMMIT keeps that write although its request
// fails and its key is free for a retry that runs it again; on the store
// itself, the write is rolled back with the transaction.
func TestRefusalEndsTxIsBroken(t *testing.T) {
	testURL(t)
	ctx := context.Background()
	for name, broken := range map[string]bool{"store": false, "mutant": true} {
		t.Run(name, func(t *testing.T) {
			s, pool := newStore(t)
			var tr idemstore.Transactor = s
			if broken {
				tr = refusalEndsTx.Wrap(s).(idemstore.Transactor)
			}
			in := instance(s, pool)
			c := idemstore.Claim{
				Identity:  idemstore.Identity{Tenant: "t", Scope: "op", Key: "k"},
				Operation: "op", Fingerprint: []byte("fp"), Token: "tok",
				Lease: 60e9, TTL: 3600e9, OnLeaseExpiry: idemstore.Takeover,
			}
			res, tx, err := tr.ClaimTx(ctx, c)
			if err != nil || !res.Won {
				t.Fatalf("ClaimTx: %+v, %v", res, err)
			}
			if err := in.Exec(ctx, tx.Driver(), "COMMIT"); err == nil {
				t.Fatal("COMMIT was not refused")
			}
			if err := in.Write(ctx, tx.Driver(), "after-refusal"); err != nil {
				t.Logf("write after the refusal: %v", err)
			}
			if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err == nil {
				t.Fatal("Commit after a refused COMMIT succeeded")
			}
			n, err := in.Count(ctx, "after-refusal")
			if err != nil {
				t.Fatal(err)
			}
			if res, err := tr.Claim(ctx, idemstore.Claim{Identity: c.Identity, Operation: "op", Fingerprint: []byte("fp"), Token: "tok2", Lease: 60e9, TTL: 3600e9, OnLeaseExpiry: idemstore.Takeover}); err != nil || !res.Won {
				t.Errorf("the retry did not win the key: %+v, %v", res, err)
			}
			if want := map[bool]int{false: 0, true: 1}[broken]; n != want {
				t.Errorf("writes kept after the refusal = %d, want %d", n, want)
			}
		})
	}
}
