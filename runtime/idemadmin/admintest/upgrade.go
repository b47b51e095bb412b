package admintest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// Upgrade writes a key in every state through old, a store on a key table
// as a previous release's migrations left it, and returns the check to run
// once every migration has run on that table: through current, a store of
// this release on it, the rows are listed as they were written, a
// completed key replays its response, an abandoned claim is taken over, an
// indeterminate key stays so, and a running claim's holder still completes
// it with its old lease token.
func Upgrade(t *testing.T, old Store) (check func(t *testing.T, current Store)) {
	t.Helper()
	f := newFixture(t, old)
	return func(t *testing.T, current Store) {
		t.Helper()
		ctx := context.Background()
		g := &fixture{store: current, admin: idemadmin.New(current, []byte(labelSecret)), tokens: f.tokens}
		es, err := g.admin.List(ctx, idemadmin.Query{})
		want := []string{keyCompleted, keyStranded, keyRunning, keyRanOut, keyOther}
		if err != nil || !slices.Equal(keysOf(es), want) {
			t.Fatalf("List after the upgrade = %v, %v; want %v", keysOf(es), err, want)
		}
		claim := func(key string, mode idemstore.LeaseExpiry) idemstore.Result {
			t.Helper()
			res, err := current.Claim(ctx, idemstore.Claim{Identity: g.id(key, operation), Operation: operation,
				Fingerprint: []byte("fp-" + key), Token: "upgraded-" + key, Lease: time.Hour, TTL: 24 * time.Hour, OnLeaseExpiry: mode})
			if err != nil {
				t.Fatalf("claim %s after the upgrade: %v", key, err)
			}
			return res
		}
		if res := claim(keyCompleted, idemstore.FailClosed); res.Won || res.Existing.Response == nil ||
			res.Existing.Response.Status != 201 || string(res.Existing.Response.Body) != body ||
			res.Existing.Response.Header.Get("Content-Type") != "application/json" {
			t.Errorf("completed key after the upgrade: %+v; want its response replayed", res)
		}
		if res := claim(keyStranded, idemstore.FailClosed); res.Won || res.Existing.State != idemstore.StateIndeterminate {
			t.Errorf("indeterminate key after the upgrade: %+v; want it still indeterminate", res)
		}
		if res := claim(keyRanOut, idemstore.Takeover); !res.Won || !res.TookOver {
			t.Errorf("abandoned claim after the upgrade: %+v; want it taken over", res)
		}
		if err := current.Complete(ctx, g.id(keyRunning, operation), f.tokens[keyRunning], idemstore.Response{Status: 201}); err != nil {
			t.Errorf("the running claim's holder completes after the upgrade: %v", err)
		}
	}
}
