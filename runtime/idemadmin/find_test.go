package idemadmin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// One client key can stand in several rows: stored in clear before the
// deployment had secrets (expired, not yet swept) and as its HMAC under a
// later secret. Find returns the row whose label it was given, never
// another row of the same client key, and Show, given the client's key,
// names the ambiguity instead of picking one of them.
func TestFindReadsTheRowItMatched(t *testing.T) {
	ctx := context.Background()
	newest, older := []byte("find-newest-secret-0123456789"), []byte("find-older-secret-0123456789")
	c := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newSQLite(t, c)
	clear := claim(t, s, "order-7", "token-clear", time.Minute)
	claim(t, s, idemstore.StoredKey(older, "order-7"), "token-hmac", time.Minute)
	a := idemadmin.New(s, newest, older)

	label := idemstore.KeyLabel(newest, "order-7")
	e, err := a.Find(ctx, label, idemadmin.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Key != clear.Key || e.Label != label {
		t.Fatalf("Find(%s) = the row of key %q labelled %s; want the row it matched, %q", label, e.Key, e.Label, clear.Key)
	}
	if _, err := a.Show(ctx, clear); !errors.Is(err, idemadmin.ErrAmbiguousKey) {
		t.Fatalf("Show of a client key stored in two rows: err %v; want ErrAmbiguousKey", err)
	}
}

// ErrAmbiguousKey tells the operator to name the row by its label. The
// row Find returns for that label must then settle: its identity, passed
// on to Forget or Resolve, names that row alone: a row stored in clear is
// not looked up again as a client's key, so its HMAC twin does not make
// its settlement fail with ErrAmbiguousKey.
func TestSettleTheRowFindMatched(t *testing.T) {
	ctx := context.Background()
	newest, older := []byte("find-newest-secret-0123456789"), []byte("find-older-secret-0123456789")
	c := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newSQLite(t, c)
	claim(t, s, "order-7", "token-clear", time.Minute)
	hmac := claim(t, s, idemstore.StoredKey(older, "order-7"), "token-hmac", time.Minute)
	c.Advance(2 * time.Minute) // both leases ran out: both resolvable
	a := idemadmin.New(s, newest, older)

	e, err := a.Find(ctx, idemstore.KeyLabel(newest, "order-7"), idemadmin.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Forget(ctx, e.Identity, e.Version); err != nil {
		t.Fatalf("Forget of the row Find matched: %v", err)
	}
	if _, err := a.Find(ctx, idemstore.KeyLabel(newest, "order-7"), idemadmin.Query{}); !errors.Is(err, idemadmin.ErrNotFound) {
		t.Fatalf("the clear row after Forget: err %v; want ErrNotFound", err)
	}
	if other, err := s.Get(ctx, hmac); err != nil || other.State != idemstore.StateInFlight {
		t.Fatalf("the HMAC row after forgetting the clear one: state %v, err %v; want it untouched", other.State, err)
	}
}
