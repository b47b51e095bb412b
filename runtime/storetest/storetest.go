package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The timings of the suite. A short lease is one a test waits out; a long
// one never runs out during a test.
const (
	shortLease = 300 * time.Millisecond
	longLease  = time.Minute
	longTTL    = time.Hour
	// pastLease is how long a test sleeps to be sure a short lease ran out,
	// with room for a slow, busy machine and a database clock that ticks in
	// milliseconds.
	pastLease = shortLease + 200*time.Millisecond
)

// Run runs the conformance suite against target. Each subtest opens its own
// new, empty store on the store's own clock.
func Run(t *testing.T, target Target) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s idemstore.Store)
	}{
		{"FirstClaimWins", testFirstClaimWins},
		{"InvalidClaimsAreRefused", testInvalidClaimsRefused},
		{"SecondClaimSeesInFlight", testSecondClaimSeesInFlight},
		{"FingerprintMismatch", testFingerprintMismatch},
		{"TenantScopeOperationMismatch", testOperationMismatch},
		{"CompletedReplay", testCompletedReplay},
		{"ReturnedRecordsAreCopies", testReturnedRecordsAreCopies},
		{"HeaderBytesRoundTrip", testHeaderBytesRoundTrip},
		{"OmittedResponse", testOmittedResponse},
		{"ExpiredRowIsReplaced", testExpiredRowIsReplaced},
		{"TTLRunsFromFirstClaim", testTTLRunsFromFirstClaim},
		{"TakeoverLeaseOutlivesTTL", testTakeoverLeaseOutlivesTTL},
		{"LeaseLongerThanTTL", testLeaseLongerThanTTL},
		{"LongestDurations", testLongestDurations},
		{"LeaseExpiryTakeover", testLeaseExpiryTakeover},
		{"LeaseExpiryFailClosed", testLeaseExpiryFailClosed},
		{"FailClosedHolderIsNeverTakenOver", testFailClosedHolder},
		{"ExpiredLeaseOfOtherRequestIsNotTakenOver", testExpiredLeaseOtherRequest},
		{"Release", testRelease},
		{"AbandonTakeover", testAbandonTakeover},
		{"AbandonFailClosed", testAbandonFailClosed},
		{"WrongTokenIsFenced", testWrongTokenIsFenced},
		{"Isolation", testIsolation},
		{"ConcurrentClaims", testConcurrentClaims},
		{"Sweep", testSweep},
		{"WaitEnded", testWaitEnded},
		{"LargeBodyRoundTrip", func(t *testing.T, s idemstore.Store) { testLargeBody(t, s, plainFinisher(s)) }},
		{"IdentityFieldsStayApart", func(t *testing.T, s idemstore.Store) { testIdentityFields(t, s, plainFinisher(s)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, target.Open(t, nil).Store)
		})
	}
	onClock := []struct {
		name string
		fn   func(t *testing.T, c clocked)
	}{
		{"LeaseFractionHolds", testLeaseFraction},
		{"LongTTLOutlivesItsClock", func(t *testing.T, c clocked) { testLongTTL(t, c, plainFinisher(c.Store)) }},
		{"ConcurrentTakeovers", testConcurrentTakeovers},
	}
	for _, tc := range onClock {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, openClocked(t, target))
		})
	}
}

// request describes one client request for a key; claim turns it into an
// idemstore.Claim with a fresh lease token.
type request struct {
	id        idemstore.Identity
	operation string
	body      string
	lease     time.Duration
	ttl       time.Duration
	mode      idemstore.LeaseExpiry
}

func newRequest(key string) request {
	return request{
		id:        idemstore.Identity{Tenant: "tenant-a", Scope: "createTransfer", Key: key},
		operation: "createTransfer",
		body:      `{"amount":100}`,
		lease:     longLease,
		ttl:       longTTL,
		mode:      idemstore.Takeover,
	}
}

func (r request) claim() idemstore.Claim {
	sum := sha256.Sum256([]byte(r.body))
	return idemstore.Claim{
		Identity:      r.id,
		Operation:     r.operation,
		Fingerprint:   sum[:],
		Token:         newToken(),
		Lease:         r.lease,
		TTL:           r.ttl,
		OnLeaseExpiry: r.mode,
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// mustClaim claims c and fails the test on a store error.
func mustClaim(t *testing.T, s idemstore.Store, c idemstore.Claim) idemstore.Result {
	t.Helper()
	res, err := s.Claim(context.Background(), c)
	if err != nil {
		t.Fatalf("Claim(%q): %v", c.Key, err)
	}
	return res
}

// mustWin claims c and fails the test unless the claim is won.
func mustWin(t *testing.T, s idemstore.Store, c idemstore.Claim) idemstore.Result {
	t.Helper()
	res := mustClaim(t, s, c)
	if !res.Won {
		t.Fatalf("Claim(%q) lost against %+v, want won", c.Key, res.Existing)
	}
	return res
}

// mustLose claims c and fails the test unless the claim is lost to a row in
// state want.
func mustLose(t *testing.T, s idemstore.Store, c idemstore.Claim, want idemstore.State) idemstore.Record {
	t.Helper()
	res := mustClaim(t, s, c)
	if res.Won {
		t.Fatalf("Claim(%q) won (TookOver %v), want lost to a %s row", c.Key, res.TookOver, want)
	}
	if res.Existing.State != want {
		t.Fatalf("Claim(%q) lost to a %q row, want %q", c.Key, res.Existing.State, want)
	}
	return res.Existing
}

func mustFence(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, idemstore.ErrFenced) {
		t.Fatalf("%s: got error %v, want idemstore.ErrFenced", what, err)
	}
}

func sampleResponse() idemstore.Response {
	return idemstore.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/transfers/tr_1"},
			"X-Multi":      {"one", "two"},
		},
		// Bytes that are not valid UTF-8 and hold a NUL, so that a store that
		// keeps the body as text is caught.
		Body: []byte("{\"id\":\"tr_1\"}\n\x00\xff\xfe"),
	}
}

func testFirstClaimWins(t *testing.T, s idemstore.Store) {
	res := mustWin(t, s, newRequest("k1").claim())
	if res.TookOver {
		t.Errorf("first claim reports TookOver")
	}
}

// invalidClaims are claims idemstore.Claim.Check refuses, each a valid claim of
// r with one thing wrong.
func invalidClaims(r request) map[string]idemstore.Claim {
	bad := map[string]func(c *idemstore.Claim){
		"empty token":        func(c *idemstore.Claim) { c.Token = "" },
		"zero lease":         func(c *idemstore.Claim) { c.Lease = 0 },
		"sub-µs lease":       func(c *idemstore.Claim) { c.Lease = 999 * time.Nanosecond },
		"negative ttl":       func(c *idemstore.Claim) { c.TTL = -time.Hour },
		"sub-µs ttl":         func(c *idemstore.Claim) { c.TTL = time.Nanosecond },
		"no lease mode":      func(c *idemstore.Claim) { c.OnLeaseExpiry = "" },
		"unknown lease mode": func(c *idemstore.Claim) { c.OnLeaseExpiry = "retry" },
	}
	out := make(map[string]idemstore.Claim, len(bad))
	for name, spoil := range bad {
		c := r.claim()
		spoil(&c)
		out[name] = c
	}
	return out
}

// testInvalidClaimsRefused: every store refuses the claims idemstore.Claim.Check
// refuses, with an error wrapping idemstore.ErrInvalidClaim, and records
// nothing: the key is still free for a valid claim afterwards.
func testInvalidClaimsRefused(t *testing.T, s idemstore.Store) {
	r := newRequest("k-invalid")
	for name, c := range invalidClaims(r) {
		res, err := s.Claim(context.Background(), c)
		if !errors.Is(err, idemstore.ErrInvalidClaim) {
			t.Errorf("%s: Claim = %+v, %v; want an error wrapping idemstore.ErrInvalidClaim", name, res, err)
		}
	}
	mustWin(t, s, r.claim())
}

func testSecondClaimSeesInFlight(t *testing.T, s idemstore.Store) {
	r := newRequest("k1")
	r.lease = 10 * time.Second
	first := r.claim()
	mustWin(t, s, first)
	rec := mustLose(t, s, r.claim(), idemstore.StateInFlight)
	// The second claim follows the first at once: a lease that already
	// lost half its time was stored shorter than asked, and a retry would
	// take over a live claim before its time.
	if rec.LeaseRemaining <= r.lease/2 || rec.LeaseRemaining > r.lease {
		t.Errorf("LeaseRemaining = %v, want in (%v, %v]", rec.LeaseRemaining, r.lease/2, r.lease)
	}
	if rec.Operation != r.operation {
		t.Errorf("Operation = %q, want %q", rec.Operation, r.operation)
	}
	if !bytes.Equal(rec.Fingerprint, first.Fingerprint) {
		t.Errorf("Fingerprint = %x, want %x", rec.Fingerprint, first.Fingerprint)
	}
	if rec.Response != nil {
		t.Errorf("in-flight record carries a response: %+v", rec.Response)
	}
}

// A different request under a live key loses whatever the row's state, and
// the record shows the stored fingerprint, so that the engine can tell a
// mismatch (422) from a replay.
func testFingerprintMismatch(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	setups := []struct {
		state idemstore.State
		setup func(t *testing.T, c idemstore.Claim)
	}{
		{idemstore.StateInFlight, func(*testing.T, idemstore.Claim) {}},
		{idemstore.StateCompleted, func(t *testing.T, c idemstore.Claim) {
			if err := s.Complete(ctx, c.Identity, c.Token, sampleResponse()); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		}},
		{idemstore.StateIndeterminate, func(t *testing.T, c idemstore.Claim) {
			if err := s.Abandon(ctx, c.Identity, c.Token, idemstore.FailClosed); err != nil {
				t.Fatalf("Abandon: %v", err)
			}
		}},
	}
	for _, tc := range setups {
		t.Run(string(tc.state), func(t *testing.T) {
			r := newRequest("mismatch-" + string(tc.state))
			first := r.claim()
			mustWin(t, s, first)
			tc.setup(t, first)

			other := r
			other.body = `{"amount":200}`
			oc := other.claim()
			rec := mustLose(t, s, oc, tc.state)
			if !bytes.Equal(rec.Fingerprint, first.Fingerprint) {
				t.Errorf("record fingerprint = %x, want the stored %x", rec.Fingerprint, first.Fingerprint)
			}
			if bytes.Equal(rec.Fingerprint, oc.Fingerprint) {
				t.Errorf("record fingerprint equals the losing claim's")
			}
			// The losing claim must not have changed the row: the first
			// request still meets its own state.
			mustLose(t, s, r.claim(), tc.state)
		})
	}
}

// With scope tenant the identity's Scope is "" and the same key on another
// operation is a mismatch, even with the same body.
func testOperationMismatch(t *testing.T, s idemstore.Store) {
	r := newRequest("shared-key")
	r.id.Scope = ""
	r.operation = "createTransfer"
	mustWin(t, s, r.claim())

	other := r
	other.operation = "createRefund"
	rec := mustLose(t, s, other.claim(), idemstore.StateInFlight)
	if rec.Operation != "createTransfer" {
		t.Errorf("record operation = %q, want createTransfer", rec.Operation)
	}

	// Nor may the other operation take over the key once its lease ran out.
	r2 := newRequest("shared-key-2")
	r2.id.Scope = ""
	r2.lease = shortLease
	mustWin(t, s, r2.claim())
	time.Sleep(pastLease)
	other2 := r2
	other2.operation = "createRefund"
	for _, mode := range []idemstore.LeaseExpiry{idemstore.Takeover, idemstore.FailClosed} {
		rec := mustLose(t, s, other2.claimWith(mode), idemstore.StateInFlight)
		if rec.Operation != "createTransfer" {
			t.Errorf("%s: record operation = %q, want createTransfer", mode, rec.Operation)
		}
	}
}

func testCompletedReplay(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	c := r.claim()
	mustWin(t, s, c)
	want := sampleResponse()
	if err := s.Complete(ctx, c.Identity, c.Token, want); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	for i := range 2 {
		rec := mustLose(t, s, r.claim(), idemstore.StateCompleted)
		if rec.Response == nil {
			t.Fatalf("replay %d: completed record has no response", i)
		}
		if diff := cmp.Diff(want, *rec.Response); diff != "" {
			t.Errorf("replay %d: response differs (-want +got):\n%s", i, diff)
		}
		if rec.LeaseRemaining != 0 {
			t.Errorf("replay %d: completed record has LeaseRemaining %v", i, rec.LeaseRemaining)
		}
	}
	// The completion is final: the token that completed cannot complete,
	// release or abandon again.
	mustFence(t, "second Complete", s.Complete(ctx, c.Identity, c.Token, sampleResponse()))
	mustFence(t, "Release after Complete", s.Release(ctx, c.Identity, c.Token))
	mustFence(t, "Abandon after Complete", s.Abandon(ctx, c.Identity, c.Token, idemstore.FailClosed))
	mustLose(t, s, r.claim(), idemstore.StateCompleted)
}

// Every header value a handler can write replays byte for byte: NUL, bytes
// that are not UTF-8, empty values, many values under one name, a name
// with no values, and no headers at all (nil) as against none kept ({}).
func testHeaderBytesRoundTrip(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf("v%d", i)
	}
	cases := map[string]http.Header{
		"bytes": {
			"X-Nul":          {"a\x00b", "\x00"},
			"X-Ff":           {"\xff\xfe\xfd"},
			"X-Invalid-Utf8": {"\xc3\x28", "caf\xe9", "\xed\xa0\x80"},
			"X-Empty":        {"", ""},
			"X-Many":         many,
			"X-Quote":        {`"\\u0000"`, "{}[]"},
			"Content-Type":   {"application/json; charset=utf-8"},
		},
		"no-values": {"X-None": {}},
		"empty":     {},
		"nil":       nil,
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRequest("headers-" + name)
			c := r.claim()
			mustWin(t, s, c)
			want := idemstore.Response{Status: http.StatusCreated, Header: h, Body: []byte("{}")}
			if err := s.Complete(ctx, c.Identity, c.Token, want); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			rec := mustLose(t, s, r.claim(), idemstore.StateCompleted)
			if rec.Response == nil {
				t.Fatal("completed record has no response")
			}
			if diff := cmp.Diff(want, *rec.Response); diff != "" {
				t.Errorf("replayed response differs (-want +got):\n%s", diff)
			}
		})
	}
}

// Neither the caller's response nor a returned record may share memory with
// what the store keeps.
func testReturnedRecordsAreCopies(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	c := r.claim()
	mustWin(t, s, c)
	resp := sampleResponse()
	if err := s.Complete(ctx, c.Identity, c.Token, resp); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	resp.Body[0] = 'X'
	resp.Header.Set("Content-Type", "text/plain")
	resp.Header["X-Multi"][0] = "changed"

	rec := mustLose(t, s, r.claim(), idemstore.StateCompleted)
	rec.Response.Body[1] = 'Y'
	rec.Response.Header.Set("Location", "/elsewhere")
	rec.Fingerprint[0] ^= 0xff

	rec = mustLose(t, s, r.claim(), idemstore.StateCompleted)
	if diff := cmp.Diff(sampleResponse(), *rec.Response); diff != "" {
		t.Errorf("stored response changed through an alias (-want +got):\n%s", diff)
	}
	if !bytes.Equal(rec.Fingerprint, c.Fingerprint) {
		t.Errorf("stored fingerprint changed through an alias")
	}
}

func testOmittedResponse(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	c := r.claim()
	mustWin(t, s, c)
	resp := idemstore.Response{
		Status: http.StatusOK,
		Header: http.Header{"Content-Type": {"application/json"}},
		// A store keeps no body for an omitted response, whatever it is given.
		Body:    []byte("too large to keep"),
		Omitted: true,
	}
	if err := s.Complete(ctx, c.Identity, c.Token, resp); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec := mustLose(t, s, r.claim(), idemstore.StateCompleted)
	if rec.Response == nil {
		t.Fatalf("completed record has no response")
	}
	if !rec.Response.Omitted || rec.Response.Status != http.StatusOK || len(rec.Response.Body) != 0 {
		t.Errorf("omitted response replays as %+v, want status 200, Omitted, no body", rec.Response)
	}
	if got := rec.Response.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("omitted response Content-Type = %q, want application/json", got)
	}
}

// After its TTL a key is a new request, whatever it held and whatever the
// new request carries.
func testExpiredRowIsReplaced(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	var olds []idemstore.Claim
	for _, state := range []idemstore.State{idemstore.StateInFlight, idemstore.StateCompleted, idemstore.StateIndeterminate} {
		r := newRequest("expired-" + string(state))
		r.ttl = ttl
		r.lease = 200 * time.Millisecond
		c := r.claim()
		mustWin(t, s, c)
		switch state {
		case idemstore.StateCompleted:
			if err := s.Complete(ctx, c.Identity, c.Token, sampleResponse()); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		case idemstore.StateIndeterminate:
			if err := s.Abandon(ctx, c.Identity, c.Token, idemstore.FailClosed); err != nil {
				t.Fatalf("Abandon: %v", err)
			}
		}
		olds = append(olds, c)
	}
	time.Sleep(ttl + 200*time.Millisecond)
	for _, old := range olds {
		r := newRequest(old.Key)
		r.body = `{"amount":999}` // a different request: expiry forgets the old one
		r.mode = idemstore.FailClosed
		nc := r.claim()
		res := mustWin(t, s, nc)
		if res.TookOver {
			t.Errorf("%s: claim of an expired key reports TookOver", old.Key)
		}
		if old.Key == "expired-in_flight" {
			mustFence(t, "old token's Complete after expiry", s.Complete(ctx, old.Identity, old.Token, sampleResponse()))
		}
		rec := mustLose(t, s, r.claim(), idemstore.StateInFlight)
		if !bytes.Equal(rec.Fingerprint, nc.Fingerprint) {
			t.Errorf("%s: row keeps fingerprint %x, want the new claim's %x", old.Key, rec.Fingerprint, nc.Fingerprint)
		}
	}
}

// A takeover does not extend the key's life: it still expires ttl after the
// first claim.
func testTTLRunsFromFirstClaim(t *testing.T, s idemstore.Store) {
	const ttl = 1200 * time.Millisecond
	const margin = 150 * time.Millisecond
	r := newRequest("k1")
	r.lease = 200 * time.Millisecond
	r.ttl = ttl
	start := time.Now()
	mustWin(t, s, r.claim())
	// The row's TTL began somewhere between start and claimed.
	claimed := time.Now()
	time.Sleep(400 * time.Millisecond)
	takeoverAt := time.Now()
	if takeoverAt.Sub(start) > ttl-margin {
		t.Skipf("inconclusive: the machine slept %v of a %v TTL", takeoverAt.Sub(start), ttl)
	}
	if res := mustWin(t, s, r.claim()); !res.TookOver {
		t.Fatalf("claim after the lease ran out did not take over")
	}
	// Just past the first claim's TTL, and well inside a TTL that the
	// takeover would have restarted.
	time.Sleep(time.Until(claimed.Add(ttl + margin)))
	if time.Since(takeoverAt) > ttl-margin {
		t.Skipf("inconclusive: %v passed since the takeover, a restarted TTL could be over too", time.Since(takeoverAt))
	}
	other := r
	other.body = `{"amount":5}`
	if res := mustWin(t, s, other.claim()); res.TookOver {
		t.Errorf("claim of an expired key reports TookOver")
	}
}

// A takeover whose lease runs past the key's TTL keeps the key alive with
// it: an in-flight row with a running lease is never absent, or another
// claim would win, and run, while the holder still runs; nor is it swept.
func testTakeoverLeaseOutlivesTTL(t *testing.T, s idemstore.Store) {
	const ttl = 900 * time.Millisecond
	r := newRequest("k1")
	r.lease = shortLease
	r.ttl = ttl
	start := time.Now()
	mustWin(t, s, r.claim())
	time.Sleep(pastLease)
	r.lease = longLease
	holder := r.claim()
	if res := mustWin(t, s, holder); !res.TookOver {
		t.Fatalf("claim after the lease ran out did not take over")
	}
	time.Sleep(time.Until(start.Add(ttl + 200*time.Millisecond)))
	wantHeldPastTTL(t, s, r, holder)
}

// wantHeldPastTTL checks a key past its TTL whose holder's lease still
// runs: no sweep deletes it, no claim of r or of another request wins it,
// and the holder's completion is stored.
func wantHeldPastTTL(t *testing.T, s idemstore.Store, r request, holder idemstore.Claim) {
	t.Helper()
	ctx := context.Background()
	if sw, ok := s.(idemstore.Sweeper); ok {
		if n, err := sw.Sweep(ctx, 100); err != nil || n != 0 {
			t.Errorf("Sweep past the TTL, with the holder's lease running = %d, %v; want 0, nil", n, err)
		}
	}
	other := r
	other.body = `{"amount":5}`
	for _, c := range []idemstore.Claim{r.claim(), other.claim()} {
		res := mustClaim(t, s, c)
		if res.Won {
			t.Fatalf("a claim won the key past its TTL while the holder's lease runs (two live executions)")
		}
		if res.Existing.State != idemstore.StateInFlight || res.Existing.LeaseRemaining <= 0 {
			t.Errorf("claim past the TTL lost to %+v, want the holder in flight", res.Existing)
		}
	}
	if err := s.Complete(ctx, holder.Identity, holder.Token, sampleResponse()); err != nil {
		t.Errorf("holder's Complete past the TTL: %v", err)
	}
}

// testLeaseLongerThanTTL: a first claim whose lease outlives its TTL keeps
// the key until the lease ends, as a takeover's does: its holder still
// runs, so no claim may win it and no sweep may delete it, and the
// holder's completion is stored.
func testLeaseLongerThanTTL(t *testing.T, s idemstore.Store) {
	r := newRequest("k1")
	r.ttl = 300 * time.Millisecond
	r.lease = longLease
	holder := r.claim()
	mustWin(t, s, holder)
	time.Sleep(r.ttl + 300*time.Millisecond)
	wantHeldPastTTL(t, s, r, holder)
}

// testLongestDurations: the longest lease and TTL a Claim can carry (a
// configuration's "for ever") hold the key, whatever unit the store keeps
// them in: a conversion that overflowed would store a row that is already
// expired, and a second claim would win and run the request again.
func testLongestDurations(t *testing.T, s idemstore.Store) {
	r := newRequest("k-longest")
	r.lease, r.ttl = math.MaxInt64-1, math.MaxInt64
	mustWin(t, s, r.claim())
	mustLose(t, s, r.claim(), idemstore.StateInFlight)
}

func testLeaseExpiryTakeover(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	r.lease = shortLease
	old := r.claim()
	mustWin(t, s, old)
	time.Sleep(pastLease)

	r.lease = longLease
	nc := r.claim()
	res := mustWin(t, s, nc)
	if !res.TookOver {
		t.Errorf("claim of an abandoned key: TookOver false, want true")
	}
	// The abandoned request can change nothing any more.
	mustFence(t, "old token's Complete", s.Complete(ctx, old.Identity, old.Token, sampleResponse()))
	mustFence(t, "old token's Release", s.Release(ctx, old.Identity, old.Token))
	mustFence(t, "old token's Abandon(takeover)", s.Abandon(ctx, old.Identity, old.Token, idemstore.Takeover))
	mustFence(t, "old token's Abandon(fail-closed)", s.Abandon(ctx, old.Identity, old.Token, idemstore.FailClosed))
	rec := mustLose(t, s, r.claim(), idemstore.StateInFlight)
	if rec.LeaseRemaining <= 0 {
		t.Errorf("after takeover LeaseRemaining = %v, want the new lease", rec.LeaseRemaining)
	}

	// The new holder completes, and everyone meets its response.
	want := sampleResponse()
	want.Status = http.StatusAccepted
	if err := s.Complete(ctx, nc.Identity, nc.Token, want); err != nil {
		t.Fatalf("new holder's Complete: %v", err)
	}
	rec = mustLose(t, s, r.claim(), idemstore.StateCompleted)
	if rec.Response == nil || rec.Response.Status != http.StatusAccepted {
		t.Errorf("replay after takeover = %+v, want the new holder's 202", rec.Response)
	}
}

func testLeaseExpiryFailClosed(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	r.lease = shortLease
	r.mode = idemstore.FailClosed
	old := r.claim()
	mustWin(t, s, old)
	time.Sleep(pastLease)

	rec := mustLose(t, s, r.claim(), idemstore.StateIndeterminate)
	if rec.LeaseRemaining != 0 {
		t.Errorf("indeterminate record has LeaseRemaining %v", rec.LeaseRemaining)
	}
	// Indeterminate is sticky: not even a takeover claim gets past it, and
	// the late original cannot resolve it either; an operator does.
	r.mode = idemstore.Takeover
	mustLose(t, s, r.claim(), idemstore.StateIndeterminate)
	mustFence(t, "late Complete of an indeterminate key", s.Complete(ctx, old.Identity, old.Token, sampleResponse()))
	mustFence(t, "late Release of an indeterminate key", s.Release(ctx, old.Identity, old.Token))
	mustLose(t, s, r.claim(), idemstore.StateIndeterminate)
}

// testFailClosedHolder: the mode of the claim that holds a key counts as
// well as the mode of the claim that meets it. A holder whose claim fails
// closed (a durable-mode claim, committed before its handler ran) may have
// left effects behind, and the process that meets it after its lease, a
// restarted one or another replica, may not know that: its takeover claim
// must mark the key indeterminate, not run the request again. A new claim
// of the key after its TTL starts afresh, with its own mode.
func testFailClosedHolder(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k-fail-closed")
	r.lease, r.mode = shortLease, idemstore.FailClosed
	holder := r.claim()
	mustWin(t, s, holder)
	time.Sleep(pastLease)
	r.mode = idemstore.Takeover
	if res := mustClaim(t, s, r.claim()); res.Won {
		t.Fatalf("a takeover claim took over a holder that fails closed (TookOver %v): the request runs again", res.TookOver)
	}
	mustLose(t, s, r.claim(), idemstore.StateIndeterminate)
	mustFence(t, "the holder's late Complete", s.Complete(ctx, holder.Identity, holder.Token, sampleResponse()))

	// Expired, the key is a new request: this claim's own mode, takeover,
	// is what the next claim after its lease meets.
	n := newRequest("k-renewed")
	n.lease, n.ttl, n.mode = shortLease, shortLease, idemstore.FailClosed
	mustWin(t, s, n.claim())
	time.Sleep(pastLease)
	n.ttl, n.mode = longTTL, idemstore.Takeover
	mustWin(t, s, n.claim())
	time.Sleep(pastLease)
	if res := mustWin(t, s, n.claim()); !res.TookOver {
		t.Errorf("claim after the renewed key's lease: TookOver false, want true")
	}
}

// Only the same request may take over an abandoned claim; another request
// under the key is a mismatch and leaves the row alone.
func testExpiredLeaseOtherRequest(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	r.lease = shortLease
	old := r.claim()
	mustWin(t, s, old)
	time.Sleep(pastLease)

	for _, mode := range []idemstore.LeaseExpiry{idemstore.Takeover, idemstore.FailClosed} {
		other := r
		other.body = `{"amount":1}`
		other.mode = mode
		rec := mustLose(t, s, other.claim(), idemstore.StateInFlight)
		if !bytes.Equal(rec.Fingerprint, old.Fingerprint) {
			t.Errorf("%s: record fingerprint = %x, want the stored %x", mode, rec.Fingerprint, old.Fingerprint)
		}
	}
	// The row is untouched: its holder can still complete it.
	if err := s.Complete(ctx, old.Identity, old.Token, sampleResponse()); err != nil {
		t.Errorf("holder's Complete after mismatching claims: %v", err)
	}
}

func testRelease(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	first := r.claim()
	mustWin(t, s, first)
	if err := s.Release(ctx, first.Identity, first.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	mustFence(t, "second Release", s.Release(ctx, first.Identity, first.Token))
	mustFence(t, "Complete after Release", s.Complete(ctx, first.Identity, first.Token, sampleResponse()))

	// A released key is free: even another request may claim it.
	r.body = `{"amount":7}`
	if res := mustWin(t, s, r.claim()); res.TookOver {
		t.Errorf("claim after Release reports TookOver")
	}
}

func testAbandonTakeover(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	old := r.claim()
	mustWin(t, s, old) // a long lease: only Abandon can end it
	if err := s.Abandon(ctx, old.Identity, old.Token, idemstore.Takeover); err != nil {
		t.Fatalf("Abandon(takeover): %v", err)
	}
	// A fail-closed request meets the ended lease and marks the key.
	mustLose(t, s, r.claimWith(idemstore.FailClosed), idemstore.StateIndeterminate)

	// Again on a fresh key, this time met by a takeover claim.
	r2 := newRequest("k2")
	old2 := r2.claim()
	mustWin(t, s, old2)
	if err := s.Abandon(ctx, old2.Identity, old2.Token, idemstore.Takeover); err != nil {
		t.Fatalf("Abandon(takeover): %v", err)
	}
	nc := r2.claim()
	if res := mustWin(t, s, nc); !res.TookOver {
		t.Errorf("claim after Abandon(takeover): TookOver false, want true")
	}
	mustFence(t, "abandoned token's Complete", s.Complete(ctx, old2.Identity, old2.Token, sampleResponse()))
	if err := s.Complete(ctx, nc.Identity, nc.Token, sampleResponse()); err != nil {
		t.Errorf("new holder's Complete: %v", err)
	}
}

func (r request) claimWith(mode idemstore.LeaseExpiry) idemstore.Claim {
	r.mode = mode
	return r.claim()
}

func testAbandonFailClosed(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	old := r.claim()
	mustWin(t, s, old)
	if err := s.Abandon(ctx, old.Identity, old.Token, idemstore.FailClosed); err != nil {
		t.Fatalf("Abandon(fail-closed): %v", err)
	}
	mustLose(t, s, r.claimWith(idemstore.Takeover), idemstore.StateIndeterminate)
	mustFence(t, "Complete after Abandon(fail-closed)", s.Complete(ctx, old.Identity, old.Token, sampleResponse()))
	mustFence(t, "second Abandon", s.Abandon(ctx, old.Identity, old.Token, idemstore.FailClosed))
}

func testWrongTokenIsFenced(t *testing.T, s idemstore.Store) {
	ctx := context.Background()
	r := newRequest("k1")
	c := r.claim()
	mustWin(t, s, c)
	bad := newToken()
	mustFence(t, "Complete with a wrong token", s.Complete(ctx, c.Identity, bad, sampleResponse()))
	mustFence(t, "Release with a wrong token", s.Release(ctx, c.Identity, bad))
	mustFence(t, "Abandon with a wrong token", s.Abandon(ctx, c.Identity, bad, idemstore.FailClosed))
	// The right token under another identity is no better.
	elsewhere := c.Identity
	elsewhere.Tenant = "tenant-b"
	mustFence(t, "Complete under another tenant", s.Complete(ctx, elsewhere, c.Token, sampleResponse()))
	missing := idemstore.Identity{Tenant: "tenant-a", Scope: "createTransfer", Key: "never-claimed"}
	mustFence(t, "Complete of a missing key", s.Complete(ctx, missing, c.Token, sampleResponse()))
	mustFence(t, "Release of a missing key", s.Release(ctx, missing, c.Token))
	mustFence(t, "Abandon of a missing key", s.Abandon(ctx, missing, c.Token, idemstore.Takeover))

	// None of that touched the row.
	rec := mustLose(t, s, r.claim(), idemstore.StateInFlight)
	if rec.LeaseRemaining <= 0 {
		t.Errorf("LeaseRemaining = %v after fenced calls, want the original lease", rec.LeaseRemaining)
	}
	if err := s.Complete(ctx, c.Identity, c.Token, sampleResponse()); err != nil {
		t.Errorf("holder's Complete: %v", err)
	}
}

func testIsolation(t *testing.T, s idemstore.Store) {
	base := newRequest("same-key")
	variants := []func(r *request){
		func(*request) {},
		func(r *request) { r.id.Tenant = "tenant-b" },
		func(r *request) { r.id.Scope = "createRefund"; r.operation = "createRefund" },
		func(r *request) { r.id.Scope = "" }, // scope tenant is its own namespace
		func(r *request) { r.id.Key = "other-key" },
	}
	for i, v := range variants {
		r := base
		v(&r)
		if res := mustClaim(t, s, r.claim()); !res.Won {
			t.Errorf("variant %d (%+v) lost to %+v; identities must not collide", i, r.id, res.Existing)
		}
	}
	// And each is now held.
	for i, v := range variants {
		r := base
		v(&r)
		if res := mustClaim(t, s, r.claim()); res.Won {
			t.Errorf("variant %d (%+v) won twice", i, r.id)
		}
	}
}

// Many goroutines claim the same keys for the same request at once: exactly
// one wins each key, every other sees it in flight, and none errs.
func testConcurrentClaims(t *testing.T, s idemstore.Store) {
	const goroutines, keys = 32, 20
	var (
		ta tally
		wg sync.WaitGroup
	)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for k := range keys {
				// Goroutines walk the keys from different starting points so
				// that every key sees contention from the first moment.
				key := fmt.Sprintf("k%02d", (k+g)%keys)
				res, err := s.Claim(context.Background(), newRequest(key).claim())
				ta.add(key, res, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	var all []string
	for k := range keys {
		all = append(all, fmt.Sprintf("k%02d", k))
	}
	ta.report(t, all, "won")
}

// tally counts what claims of the same request made at once met: the
// wins of each key, and the errors and losses to anything but the
// winner's in-flight row.
type tally struct {
	mu   sync.Mutex
	wins map[string]int
	errs []error
}

func (ta *tally) add(key string, res idemstore.Result, err error) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	switch {
	case err != nil:
		ta.errs = append(ta.errs, fmt.Errorf("%s: %w", key, err))
	case res.Won:
		if ta.wins == nil {
			ta.wins = map[string]int{}
		}
		ta.wins[key]++
	case res.Existing.State != idemstore.StateInFlight:
		ta.errs = append(ta.errs, fmt.Errorf("%s: lost to a %q row, want in_flight", key, res.Existing.State))
	}
}

// report fails t for the first errors and for each of keys not won
// exactly once; won says what a win was.
func (ta *tally) report(t *testing.T, keys []string, won string) {
	t.Helper()
	for i, err := range ta.errs {
		if i == 5 {
			t.Errorf("... and %d more errors", len(ta.errs)-5)
			break
		}
		t.Error(err)
	}
	for _, key := range keys {
		if n := ta.wins[key]; n != 1 {
			t.Errorf("key %s %s %d times at once, want exactly once", key, won, n)
		}
	}
}

func testSweep(t *testing.T, s idemstore.Store) {
	sw, ok := s.(idemstore.Sweeper)
	if !ok {
		t.Skipf("%T does not implement idemstore.Sweeper", s)
	}
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	start := time.Now()
	for i := range 5 {
		r := newRequest(fmt.Sprintf("short-%d", i))
		r.ttl = ttl
		r.lease = 100 * time.Millisecond
		mustWin(t, s, r.claim())
	}
	// The last short row expires ttl after its claim returned at the
	// latest; under load that is well after start.
	shortDone := time.Now()
	var live []request
	for i := range 3 {
		r := newRequest(fmt.Sprintf("long-%d", i))
		mustWin(t, s, r.claim())
		live = append(live, r)
	}
	// Only a run fast enough to sweep before the short TTL ends can check
	// that nothing live is swept; a slow one would see rows expire.
	if time.Since(start) < ttl/2 {
		if n, err := sw.Sweep(ctx, 100); err != nil || n != 0 {
			t.Fatalf("Sweep before expiry = %d, %v; want 0, nil", n, err)
		}
	}
	time.Sleep(time.Until(shortDone.Add(ttl + 200*time.Millisecond)))

	if n, err := sw.Sweep(ctx, 0); err != nil || n != 0 {
		t.Errorf("Sweep(0) = %d, %v; want 0, nil", n, err)
	}
	if n, err := sw.Sweep(ctx, 3); err != nil || n != 3 {
		t.Errorf("first Sweep(3) = %d, %v; want 3, nil", n, err)
	}
	if n, err := sw.Sweep(ctx, 3); err != nil || n != 2 {
		t.Errorf("second Sweep(3) = %d, %v; want 2, nil", n, err)
	}
	if n, err := sw.Sweep(ctx, 3); err != nil || n != 0 {
		t.Errorf("third Sweep(3) = %d, %v; want 0, nil", n, err)
	}
	for _, r := range live {
		mustLose(t, s, r.claim(), idemstore.StateInFlight)
	}
}
