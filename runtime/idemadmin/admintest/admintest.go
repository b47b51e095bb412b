// Package admintest is the conformance suite every idemadmin.Store passes.
// A store's own tests call Run with the storetest.Target they hand every
// other suite; the suite writes keys through the store's idemstore.Store side, in
// every state an operator meets, and checks what idemadmin.Admin lists,
// shows, counts and resolves on them, and that the engine's side then sees
// the resolution.
//
// It needs no clock of its own: an abandoned claim stands for a request
// whose lease ran out (idemstore.Store.Abandon), so the suite never sleeps.
package admintest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// Store is a store with both sides: the engine's and the operator's.
type Store interface {
	idemstore.Store
	idemadmin.Store
}

// Run runs the suite against target. Each subtest opens its own new, empty
// store, which must be an idemadmin.Store as well as an idemstore.Store.
func Run(t *testing.T, target storetest.Target) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, f *fixture)
	}{
		{"ListOldestFirstWithoutBodies", testList},
		{"ListFilters", testListFilters},
		{"ShowReadsTheResponse", testShow},
		{"Stats", testStats},
		{"ResolveIsFencedByVersion", testResolve},
		{"ForgetLetsTheNextClaimWin", testForget},
		{"KnownOutcomesAreNotResolvable", testNotResolvable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := target.Open(t, nil)
			s, ok := in.Store.(Store)
			if !ok {
				t.Fatalf("admintest: %T is no idemadmin.Store", in.Store)
			}
			tc.fn(t, newFixture(t, s))
		})
	}
}

const (
	tenant    = "acme"
	operation = "createTransfer"
	other     = "refundTransfer"
)

// The keys of the fixture, claimed in this order (so also sorted by name,
// which breaks a tie of creation times the same way).
const (
	keyCompleted = "k1-completed"
	keyStranded  = "k2-indeterminate"
	keyRunning   = "k3-in-flight"
	keyRanOut    = "k4-lease-ran-out"
	keyOther     = "k5-other-operation"
)

// fixture is a store holding one key in each state an operator meets.
type fixture struct {
	store  Store
	admin  *idemadmin.Admin
	tokens map[string]string
}

// labelSecret labels the fixture's keys.
const labelSecret = "admintest-label-secret-0123456789"

// body is the completed key's stored response body.
const body = `{"id":"tr_1"}`

func newFixture(t *testing.T, s Store) *fixture {
	t.Helper()
	f := &fixture{store: s, admin: idemadmin.New(s, []byte(labelSecret)), tokens: map[string]string{}}
	ctx := context.Background()
	f.claim(t, keyCompleted, operation, idemstore.FailClosed)
	resp := idemstore.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
	if err := s.Complete(ctx, f.id(keyCompleted, operation), f.tokens[keyCompleted], resp); err != nil {
		t.Fatalf("complete: %v", err)
	}
	f.claim(t, keyStranded, operation, idemstore.FailClosed)
	if err := s.Abandon(ctx, f.id(keyStranded, operation), f.tokens[keyStranded], idemstore.FailClosed); err != nil {
		t.Fatalf("abandon fail-closed: %v", err)
	}
	f.claim(t, keyRunning, operation, idemstore.FailClosed)
	f.claim(t, keyRanOut, operation, idemstore.Takeover)
	if err := s.Abandon(ctx, f.id(keyRanOut, operation), f.tokens[keyRanOut], idemstore.Takeover); err != nil {
		t.Fatalf("abandon takeover: %v", err)
	}
	f.claim(t, keyOther, other, idemstore.FailClosed)
	return f
}

func (f *fixture) id(key, op string) idemstore.Identity {
	return idemstore.Identity{Tenant: tenant, Scope: op, Key: key}
}

func (f *fixture) claim(t *testing.T, key, op string, mode idemstore.LeaseExpiry) {
	t.Helper()
	token := fmt.Sprintf("token-%s-%d", key, len(f.tokens))
	res, err := f.store.Claim(context.Background(), idemstore.Claim{
		Identity: f.id(key, op), Operation: op, Fingerprint: []byte("fp-" + key),
		Token: token, Lease: time.Hour, TTL: 24 * time.Hour, OnLeaseExpiry: mode,
	})
	if err != nil || !res.Won {
		t.Fatalf("claim %s: %+v, %v", key, res, err)
	}
	f.tokens[key] = token
}

// show reads key through the Admin by its stored identity.
func (f *fixture) show(t *testing.T, key string) idemadmin.Entry {
	t.Helper()
	e, err := f.admin.Show(context.Background(), f.id(key, operation))
	if err != nil {
		t.Fatalf("show %s: %v", key, err)
	}
	return e
}

func keysOf(es []idemadmin.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key
	}
	return out
}

func testList(t *testing.T, f *fixture) {
	es, err := f.admin.List(context.Background(), idemadmin.Query{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{keyCompleted, keyStranded, keyRunning, keyRanOut, keyOther}
	if got := keysOf(es); !slices.Equal(got, want) {
		t.Fatalf("List = %v; want every live key, oldest first: %v", got, want)
	}
	states := []idemstore.State{idemstore.StateCompleted, idemstore.StateIndeterminate, idemstore.StateInFlight, idemstore.StateInFlight, idemstore.StateInFlight}
	for i, e := range es {
		switch {
		case e.State != states[i]:
			t.Errorf("%s: state %s, want %s", e.Key, e.State, states[i])
		case e.Tenant != tenant || e.Operation == "" || e.Scope != e.Operation:
			t.Errorf("%s: tenant %q, scope %q, operation %q", e.Key, e.Tenant, e.Scope, e.Operation)
		case e.Label == "" || e.Version == "":
			t.Errorf("%s: label %q, version %q; want both", e.Key, e.Label, e.Version)
		case e.CreatedAt.IsZero() || e.ReadAt.Before(e.CreatedAt) || !e.ExpiresAt.After(e.ReadAt):
			t.Errorf("%s: created %v, read %v, expires %v", e.Key, e.CreatedAt, e.ReadAt, e.ExpiresAt)
		case e.Body != nil || e.Header != nil:
			t.Errorf("%s: a listed entry carries its response", e.Key)
		}
	}
	if c := es[0]; c.Status != 201 || c.BodyBytes != len(body) || c.CompletedAt.IsZero() {
		t.Errorf("completed key: status %d, body %d bytes, completed %v; want 201, %d, set", c.Status, c.BodyBytes, c.CompletedAt, len(body))
	}
	if !es[2].LeaseRunning() || es[3].LeaseRunning() || !es[3].Resolvable() || !es[1].Resolvable() || es[0].Resolvable() || es[2].Resolvable() {
		t.Errorf("leases and resolvability: running %v/%v, resolvable %v %v %v %v",
			es[2].LeaseRunning(), es[3].LeaseRunning(), es[0].Resolvable(), es[1].Resolvable(), es[2].Resolvable(), es[3].Resolvable())
	}
}

func testListFilters(t *testing.T, f *fixture) {
	ctx := context.Background()
	tests := []struct {
		q    idemadmin.Query
		want []string
	}{
		{idemadmin.Query{States: []idemstore.State{idemstore.StateIndeterminate}}, []string{keyStranded}},
		{idemadmin.Query{States: []idemstore.State{idemstore.StateInFlight}, Limit: 2}, []string{keyRunning, keyRanOut}},
		{idemadmin.Query{Operation: other}, []string{keyOther}},
		{idemadmin.Query{Tenant: "globex"}, []string{}},
		{idemadmin.Query{OlderThan: time.Hour}, []string{}},
		{idemadmin.Query{ExpiringWithin: time.Hour}, []string{}},
		{idemadmin.Query{ExpiringWithin: 48 * time.Hour, Limit: 1}, []string{keyCompleted}},
	}
	for _, tc := range tests {
		es, err := f.admin.List(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := keysOf(es); !slices.Equal(got, tc.want) {
			t.Errorf("List(%+v) = %v; want %v", tc.q, got, tc.want)
		}
	}
	label := f.show(t, keyStranded).Label
	e, err := f.admin.Find(ctx, label, idemadmin.Query{})
	if err != nil || e.Key != keyStranded {
		t.Errorf("Find(%s) = %s, %v; want %s", label, e.Key, err, keyStranded)
	}
}

func testShow(t *testing.T, f *fixture) {
	e := f.show(t, keyCompleted)
	if e.Status != 201 || string(e.Body) != body || e.Header.Get("Content-Type") != "application/json" || e.Sealed {
		t.Fatalf("Show = status %d, header %v, body %q, sealed %v; want the stored response", e.Status, e.Header, e.Body, e.Sealed)
	}
	if string(e.Fingerprint) != "fp-"+keyCompleted {
		t.Errorf("fingerprint %q", e.Fingerprint)
	}
	if _, err := f.admin.Show(context.Background(), f.id("absent", operation)); !errors.Is(err, idemadmin.ErrNotFound) {
		t.Errorf("Show(absent) = %v; want ErrNotFound", err)
	}
}

func testStats(t *testing.T, f *fixture) {
	st, err := f.admin.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []idemadmin.Count{
		{Operation: operation, State: idemstore.StateCompleted, Keys: 1},
		{Operation: operation, State: idemstore.StateInFlight, Keys: 2},
		{Operation: operation, State: idemstore.StateIndeterminate, Keys: 1},
		{Operation: other, State: idemstore.StateInFlight, Keys: 1},
	}
	if !slices.Equal(st.Counts, want) || st.Expired != 0 || st.ReadAt.IsZero() {
		t.Fatalf("Stats = %+v, expired %d, read %v; want %+v", st.Counts, st.Expired, st.ReadAt, want)
	}
	if st.OldestInFlight == nil || st.OldestInFlight.Key != keyRunning {
		t.Fatalf("oldest in flight = %+v; want %s", st.OldestInFlight, keyRunning)
	}
}

func testResolve(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := f.id(keyStranded, operation)
	seen := f.show(t, keyStranded)
	resp := idemstore.Response{Status: 201, Header: http.Header{"content-type": {"application/json"}}, Body: []byte(`{"id":"tr_found"}`)}
	if err := f.admin.Resolve(ctx, id, "000000000000", resp); !errors.Is(err, idemadmin.ErrChanged) {
		t.Fatalf("Resolve with a wrong version = %v; want ErrChanged", err)
	}
	if err := f.admin.Resolve(ctx, id, seen.Version, resp); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	// The engine's side replays the resolution.
	res, err := f.store.Claim(ctx, idemstore.Claim{Identity: id, Operation: operation, Fingerprint: []byte("fp-" + keyStranded),
		Token: "retry", Lease: time.Hour, TTL: 24 * time.Hour, OnLeaseExpiry: idemstore.FailClosed})
	if err != nil || res.Won || res.Existing.Response == nil || res.Existing.Response.Status != 201 ||
		string(res.Existing.Response.Body) != `{"id":"tr_found"}` || res.Existing.Response.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("retry after Resolve: %+v, %v; want the resolution replayed", res, err)
	}
	// The version shown before no longer names the row.
	if err := f.admin.Resolve(ctx, id, seen.Version, resp); !errors.Is(err, idemadmin.ErrChanged) {
		t.Fatalf("second Resolve = %v; want ErrChanged", err)
	}
}

func testForget(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := f.id(keyRanOut, operation)
	seen := f.show(t, keyRanOut)
	if !seen.Resolvable() {
		t.Fatalf("an in-flight key whose lease ran out is not resolvable: %+v", seen)
	}
	if err := f.admin.Forget(ctx, id, seen.Version); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	if _, err := f.admin.Show(ctx, id); !errors.Is(err, idemadmin.ErrNotFound) {
		t.Fatalf("Show after Forget = %v; want ErrNotFound", err)
	}
	// The abandoned holder can change nothing any more.
	if err := f.store.Complete(ctx, id, f.tokens[keyRanOut], idemstore.Response{Status: 201}); !errors.Is(err, idemstore.ErrFenced) {
		t.Fatalf("late Complete after Forget = %v; want ErrFenced", err)
	}
	res, err := f.store.Claim(ctx, idemstore.Claim{Identity: id, Operation: operation, Fingerprint: []byte("fp-" + keyRanOut),
		Token: "after-forget", Lease: time.Hour, TTL: 24 * time.Hour, OnLeaseExpiry: idemstore.Takeover})
	if err != nil || !res.Won || res.TookOver {
		t.Fatalf("claim after Forget: %+v, %v; want a fresh win", res, err)
	}
	es, err := f.admin.List(ctx, idemadmin.Query{States: []idemstore.State{idemstore.StateInFlight}})
	if err != nil || !slices.Contains(keysOf(es), keyRanOut) {
		t.Fatalf("List after the new claim = %v, %v; want %s in flight", keysOf(es), err, keyRanOut)
	}
}

func testNotResolvable(t *testing.T, f *fixture) {
	ctx := context.Background()
	for _, key := range []string{keyCompleted, keyRunning} {
		e := f.show(t, key)
		if err := e.Settleable(e.Version); !errors.Is(err, idemadmin.ErrNotResolvable) {
			t.Errorf("%s: Settleable = %v; want ErrNotResolvable", key, err)
		}
		if err := f.admin.Forget(ctx, f.id(key, operation), e.Version); !errors.Is(err, idemadmin.ErrNotResolvable) {
			t.Errorf("%s: Forget = %v; want ErrNotResolvable", key, err)
		}
	}
	// Nothing changed.
	if e := f.show(t, keyRunning); e.State != idemstore.StateInFlight || !e.LeaseRunning() {
		t.Errorf("running key after a refused Forget: %+v", e)
	}
}
