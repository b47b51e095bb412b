package idemadmin_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore/pgstoretest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// adminStore is an idemstore.Store that also serves the operator.
type adminStore interface {
	idemstore.Store
	idemadmin.Store
}

func newSQLite(t *testing.T, c *storetest.Clock) adminStore {
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "keys.db"), sqlitestore.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func newPostgres(t *testing.T) adminStore {
	s, _ := pgstoretest.New(t)
	return s
}

func claim(t *testing.T, s idemstore.Store, key, token string, lease time.Duration) idemstore.Identity {
	t.Helper()
	c := idemstore.Claim{
		Identity:  idemstore.Identity{Tenant: "acme", Scope: "createTransfer", Key: key},
		Operation: "createTransfer", Fingerprint: []byte{1, 2, 3}, Token: token,
		Lease: lease, TTL: time.Hour, OnLeaseExpiry: idemstore.FailClosed,
	}
	res, err := s.Claim(context.Background(), c)
	if err != nil || !res.Won {
		t.Fatalf("claim %s: won %v, err %v", key, res.Won, err)
	}
	return c.Identity
}

// The operator's change is fenced in the store itself, not only by the
// version check: an entry read before the key changed settles nothing.
func TestSettleIsFenced(t *testing.T) {
	ctx := context.Background()
	c := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	for name, mk := range map[string]func(*testing.T) adminStore{
		"sqlite":   func(t *testing.T) adminStore { return newSQLite(t, c) },
		"postgres": newPostgres,
	} {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			a := idemadmin.New(s, []byte("secret"))
			id := claim(t, s, "k1", "token-1", time.Hour)

			// In flight with its lease running: not the operator's to settle.
			e, err := a.Show(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if e.Resolvable() {
				t.Fatalf("a key in flight under a running lease is resolvable: %+v", e)
			}
			if err := a.Forget(ctx, id, e.Version); !errors.Is(err, idemadmin.ErrNotResolvable) {
				t.Fatalf("Forget of a running claim: %v, want ErrNotResolvable", err)
			}
			if err := s.Settle(ctx, e, nil); !errors.Is(err, idemadmin.ErrChanged) {
				t.Fatalf("Settle of a running claim: %v, want ErrChanged", err)
			}

			if err := s.Abandon(ctx, id, "token-1", idemstore.FailClosed); err != nil {
				t.Fatal(err)
			}
			seen, err := a.Show(ctx, id)
			if err != nil || seen.State != idemstore.StateIndeterminate || !seen.Resolvable() {
				t.Fatalf("after fail-closed abandon: %+v, %v", seen, err)
			}
			// Another operator forgets it and a new request claims it again
			// under the same key: the first operator's view is stale.
			if err := a.Forget(ctx, id, seen.Version); err != nil {
				t.Fatal(err)
			}
			claim(t, s, "k1", "token-2", time.Hour)
			if err := s.Abandon(ctx, id, "token-2", idemstore.FailClosed); err != nil {
				t.Fatal(err)
			}
			resp := &idemstore.Response{Status: 201, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("stale")}
			if err := s.Settle(ctx, seen, resp); !errors.Is(err, idemadmin.ErrChanged) {
				t.Fatalf("Settle with a stale view: %v, want ErrChanged", err)
			}
			if err := a.Resolve(ctx, id, seen.Version, *resp); !errors.Is(err, idemadmin.ErrChanged) {
				t.Fatalf("Resolve with a stale version: %v, want ErrChanged", err)
			}
			now, err := a.Show(ctx, id)
			if err != nil || now.State != idemstore.StateIndeterminate {
				t.Fatalf("the new claim's row changed: %+v, %v", now, err)
			}
			// The current version resolves it; a late completion from the
			// request that died is fenced out and changes nothing.
			if err := a.Resolve(ctx, id, now.Version, *resp); err != nil {
				t.Fatal(err)
			}
			if err := s.Complete(ctx, id, "token-2", idemstore.Response{Status: 500}); !errors.Is(err, idemstore.ErrFenced) {
				t.Fatalf("late completion after resolve: %v, want ErrFenced", err)
			}
			done, err := a.Show(ctx, id)
			if err != nil || done.State != idemstore.StateCompleted || done.Status != 201 || string(done.Body) != "stale" ||
				done.Header.Get("Content-Type") != "text/plain" {
				t.Fatalf("resolved key: %+v, %v", done, err)
			}
		})
	}
}

// An in-flight key whose lease ran out (its request died, no retry came
// yet) is outcome-unknown too, and the operator may resolve it.
func TestLapsedClaimIsResolvable(t *testing.T) {
	ctx := context.Background()
	c := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newSQLite(t, c)
	a := idemadmin.New(s, []byte("secret"))
	id := claim(t, s, "k1", "token-1", time.Minute)
	c.Advance(2 * time.Minute)
	es, err := a.List(ctx, idemadmin.Query{Label: idemstore.KeyLabel([]byte("secret"), "k1")})
	if err != nil || len(es) != 1 || !es[0].Resolvable() || es[0].State != idemstore.StateInFlight {
		t.Fatalf("List by label: %+v, %v; want the lapsed claim, resolvable", es, err)
	}
	if err := a.Forget(ctx, id, es[0].Version); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Show(ctx, id); !errors.Is(err, idemadmin.ErrNotFound) {
		t.Fatalf("Show after Forget: %v, want ErrNotFound", err)
	}
}

// A resolution is refused when the engine would never have stored it: a
// status that tells a client to retry would be replayed to every retry for
// good.
func TestCheckResponseRefusesWhatIsNeverStored(t *testing.T) {
	for status, ok := range map[int]bool{
		100: false, 199: false, 200: true, 201: true, 400: true, 401: false, 403: false, 404: true,
		408: false, 409: true, 422: true, 425: false, 429: false, 500: true, 502: false,
		503: false, 504: false, 600: false,
	} {
		err := idemadmin.CheckResponse(idemstore.Response{Status: status})
		if (err == nil) != ok {
			t.Errorf("CheckResponse(%d) = %v, want accepted %v", status, err, ok)
		}
	}
	if err := idemadmin.CheckResponse(idemstore.Response{Status: 201, Header: map[string][]string{"Set-Cookie": {"a=b"}}}); err == nil {
		t.Error("CheckResponse accepted a never-stored header")
	}
}

// A resolution's header is one an HTTP response can carry: a name that is
// a token, a value without control characters. A line break in a value
// would otherwise be stored and replayed as the operator typed it.
func TestCheckResponseRefusesMalformedHeaders(t *testing.T) {
	for name, value := range map[string]string{
		"Bad Name":      "v",
		"":              "v",
		"X-Ok:":         "v",
		"X-Note":        "a\r\nSet-Cookie: session=stolen",
		"X-Escape":      "\x1b[2J",
		"X-Nul":         "a\x00b",
		"X-Del":         "a\x7fb",
		"X-Bad\nHeader": "v",
	} {
		resp := idemstore.Response{Status: 201, Header: map[string][]string{name: {value}}}
		if err := idemadmin.CheckResponse(resp); err == nil {
			t.Errorf("CheckResponse accepted header %q: %q", name, value)
		}
	}
	ok := idemstore.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json; charset=utf-8"}, "X-Tab": {"a\tb"}}}
	if err := idemadmin.CheckResponse(ok); err != nil {
		t.Errorf("CheckResponse refused well-formed headers: %v", err)
	}
}
