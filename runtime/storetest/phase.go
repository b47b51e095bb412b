package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// RunPhases runs the recovery-point suite (idemstore.PhaseStore,
// docs/semantics.md §8.2) against target, whose store must keep phases.
// Each subtest opens its own new, empty store on the store's own clock.
func RunPhases(t *testing.T, target Target) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s idemstore.PhaseStore)
	}{
		{"UnrecordedIsNotFound", testPhaseUnrecorded},
		{"FirstRecordWins", testPhaseFirstRecordWins},
		{"ConcurrentRecordsAgree", testPhaseConcurrentRecords},
		{"BytesRoundTrip", testPhaseBytes},
		{"OutlivesReleaseAndAbandon", testPhaseOutlivesRelease},
		{"IsolatedByIdentityAndName", testPhaseIsolation},
		{"Expires", testPhaseExpires},
		{"Refusals", testPhaseRefusals},
		{"CommitsBesideTx", testPhaseBesideTx},
		{"Listed", testPhaseListed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, phaseStore(t, target.Open(t, nil).Store))
		})
	}
	t.Run("LongTTLOutlivesItsClock", func(t *testing.T) {
		t.Parallel()
		c := openClocked(t, target)
		testPhaseLongTTL(t, c, phaseStore(t, c.Store))
	})
}

// phaseStore is s as an idemstore.PhaseStore, or fails the test.
func phaseStore(t *testing.T, s idemstore.Store) idemstore.PhaseStore {
	t.Helper()
	ps, ok := s.(idemstore.PhaseStore)
	if !ok {
		t.Fatalf("%T does not implement idemstore.PhaseStore", s)
	}
	return ps
}

// testPhaseLongTTL: a phase recorded with a day's ttl is found two
// minutes, an hour and twenty-three hours later, and is gone after the
// day. A store that capped the ttl would let a retry run the phase again.
// Where the phase expires by a clock the test cannot set
// (Instance.PhaseTTL), the time it has left is read instead, and its
// expiry is left to testPhaseExpires.
func testPhaseLongTTL(t *testing.T, c clocked, s idemstore.PhaseStore) {
	ctx := context.Background()
	r := newRequest("k-day")
	if _, err := s.RecordPhase(ctx, r.id, "charge", []byte("ch_day"), longTTLDay); err != nil {
		t.Fatalf("RecordPhase: %v", err)
	}
	if c.PhaseTTL != nil {
		left, err := c.PhaseTTL(ctx, r.id, "charge")
		if err != nil {
			t.Fatalf("the phase's time left: %v", err)
		}
		if left < longTTLDay-time.Minute || left > longTTLDay {
			t.Errorf("a phase recorded with a ttl of %v has %v left, want about all of it", longTTLDay, left)
		}
	}
	for _, d := range []time.Duration{2 * time.Minute, time.Hour, 22*time.Hour - 2*time.Minute} {
		c.advance(t, d)
		wantPhase(t, s, r.id, "charge", []byte("ch_day"))
	}
	if c.PhaseTTL == nil {
		c.advance(t, time.Hour+time.Second)
		wantPhase(t, s, r.id, "charge", nil)
	}
}

// mustRecord records result as phase name of id and returns what stands.
func mustRecord(t *testing.T, s idemstore.PhaseStore, id idemstore.Identity, name string, result []byte) []byte {
	t.Helper()
	got, err := s.RecordPhase(context.Background(), id, name, result, longTTL)
	if err != nil {
		t.Fatalf("RecordPhase(%q, %q): %v", id.Key, name, err)
	}
	return got
}

// wantPhase fails the test unless phase name of id is recorded as want,
// or, with want nil, is not recorded.
func wantPhase(t *testing.T, s idemstore.PhaseStore, id idemstore.Identity, name string, want []byte) {
	t.Helper()
	got, found, err := s.LoadPhase(context.Background(), id, name)
	switch {
	case err != nil:
		t.Fatalf("LoadPhase(%q, %q): %v", id.Key, name, err)
	case want == nil && found:
		t.Fatalf("LoadPhase(%q, %q) found %q, want nothing recorded", id.Key, name, got)
	case want != nil && (!found || !bytes.Equal(got, want)):
		t.Fatalf("LoadPhase(%q, %q) = %q, found %v; want %q", id.Key, name, got, found, want)
	}
}

func testPhaseUnrecorded(t *testing.T, s idemstore.PhaseStore) {
	r := newRequest("k1")
	wantPhase(t, s, r.id, "charge", nil)
	mustWin(t, s, r.claim())
	wantPhase(t, s, r.id, "charge", nil)
}

func testPhaseFirstRecordWins(t *testing.T, s idemstore.PhaseStore) {
	r := newRequest("k1")
	mustWin(t, s, r.claim())
	if got := mustRecord(t, s, r.id, "charge", []byte("ch_1")); string(got) != "ch_1" {
		t.Fatalf("first record returned %q, want ch_1", got)
	}
	if got := mustRecord(t, s, r.id, "charge", []byte("ch_2")); string(got) != "ch_1" {
		t.Fatalf("second record returned %q, want the first's ch_1", got)
	}
	wantPhase(t, s, r.id, "charge", []byte("ch_1"))
}

func testPhaseConcurrentRecords(t *testing.T, s idemstore.PhaseStore) {
	r := newRequest("k1")
	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.RecordPhase(context.Background(), r.id, "charge", fmt.Appendf(nil, "ch_%d", i), longTTL)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("record %d: %v", i, errs[i])
		}
		if !bytes.Equal(got[i], got[0]) {
			t.Fatalf("concurrent records returned %q and %q; want one result for all", got[0], got[i])
		}
	}
	wantPhase(t, s, r.id, "charge", got[0])
}

func testPhaseBytes(t *testing.T, s idemstore.PhaseStore) {
	r := newRequest("k1")
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	mustRecord(t, s, r.id, "bytes", all)
	wantPhase(t, s, r.id, "bytes", all)
	// An empty result is a result: the phase ran and returned nothing.
	mustRecord(t, s, r.id, "empty", []byte{})
	wantPhase(t, s, r.id, "empty", []byte{})
	big := bytes.Repeat([]byte{0xfe}, idemstore.MaxPhaseResult)
	mustRecord(t, s, r.id, "big", big)
	wantPhase(t, s, r.id, "big", big)
}

func testPhaseOutlivesRelease(t *testing.T, s idemstore.PhaseStore) {
	ctx := context.Background()
	r := newRequest("k1")
	c := r.claim()
	mustWin(t, s, c)
	mustRecord(t, s, r.id, "charge", []byte("ch_1"))
	if err := s.Release(ctx, c.Identity, c.Token); err != nil {
		t.Fatal(err)
	}
	// A released claim's retry must still skip the phase.
	wantPhase(t, s, r.id, "charge", []byte("ch_1"))
	c = r.claim()
	mustWin(t, s, c)
	wantPhase(t, s, r.id, "charge", []byte("ch_1"))
	if err := s.Abandon(ctx, c.Identity, c.Token, idemstore.Takeover); err != nil {
		t.Fatal(err)
	}
	if res := mustWin(t, s, r.claim()); !res.TookOver {
		t.Fatal("the abandoned claim was not taken over")
	}
	wantPhase(t, s, r.id, "charge", []byte("ch_1"))
}

func testPhaseIsolation(t *testing.T, s idemstore.PhaseStore) {
	r := newRequest("k1")
	mustRecord(t, s, r.id, "charge", []byte("ch_1"))
	for what, id := range map[string]idemstore.Identity{
		"tenant": {Tenant: "tenant-b", Scope: r.id.Scope, Key: r.id.Key},
		"scope":  {Tenant: r.id.Tenant, Scope: "", Key: r.id.Key},
		"key":    {Tenant: r.id.Tenant, Scope: r.id.Scope, Key: "k2"},
	} {
		t.Run(what, func(t *testing.T) { wantPhase(t, s, id, "charge", nil) })
	}
	wantPhase(t, s, r.id, "refund", nil)
	wantPhase(t, s, r.id, "charge", []byte("ch_1"))
}

func testPhaseExpires(t *testing.T, s idemstore.PhaseStore) {
	ctx := context.Background()
	r := newRequest("k1")
	if _, err := s.RecordPhase(ctx, r.id, "charge", []byte("old"), shortLease); err != nil {
		t.Fatal(err)
	}
	// A live phase beside it, which no sweep may take: a retry after it
	// would call the downstream again.
	mustRecord(t, s, r.id, "receipt", []byte("live"))
	time.Sleep(pastLease)
	wantPhase(t, s, r.id, "charge", nil)
	if sw, ok := s.(idemstore.Sweeper); ok {
		if n, err := sw.Sweep(ctx, 10); err != nil || n != 1 {
			t.Errorf("Sweep with one expired phase = %d, %v; want 1, nil", n, err)
		}
	}
	wantPhase(t, s, r.id, "receipt", []byte("live"))
	// A record after expiry is a first record.
	if got := mustRecord(t, s, r.id, "charge", []byte("new")); string(got) != "new" {
		t.Fatalf("record after expiry returned %q, want new", got)
	}
}

func testPhaseRefusals(t *testing.T, s idemstore.PhaseStore) {
	ctx := context.Background()
	r := newRequest("k1")
	big := make([]byte, idemstore.MaxPhaseResult+1)
	if _, err := s.RecordPhase(ctx, r.id, "big", big, longTTL); !errors.Is(err, idemstore.ErrPhaseResultTooLarge) {
		t.Errorf("a result over MaxPhaseResult: %v, want ErrPhaseResultTooLarge", err)
	}
	if _, err := s.RecordPhase(ctx, r.id, "", []byte("x"), longTTL); err == nil {
		t.Error("a phase without a name was recorded")
	}
	if _, err := s.RecordPhase(ctx, r.id, "zero", []byte("x"), 0); err == nil {
		t.Error("a phase with ttl 0 was recorded")
	}
	wantPhase(t, s, r.id, "big", nil)
	wantPhase(t, s, r.id, "zero", nil)
}

// testPhaseBesideTx: a phase recorded while the request's claim is held
// in a transaction commits on its own, and outlives the transaction's
// rollback.
func testPhaseBesideTx(t *testing.T, s idemstore.PhaseStore) {
	tr, ok := s.(idemstore.Transactor)
	if !ok || !s.PhasesBesideTx() {
		t.Skipf("%T records no phase beside a transaction", s)
	}
	ctx := context.Background()
	r := newRequest("k1")
	res, tx, err := tr.ClaimTx(ctx, r.claim())
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx: %+v, %v", res, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.RecordPhase(ctx, r.id, "charge", []byte("ch_1"), longTTL)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RecordPhase waited for the request's own transaction")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, s, r.id, "charge", []byte("ch_1"))
}

// testPhaseListed: the operator's listing shows an identity's live phases
// by name, with their stored sizes, and no other identity's.
func testPhaseListed(t *testing.T, s idemstore.PhaseStore) {
	l, ok := s.(idemstore.PhaseLister)
	if !ok {
		t.Skipf("%T lists no phases", s)
	}
	ctx := context.Background()
	r, other := newRequest("k1"), newRequest("k2")
	mustRecord(t, s, r.id, "refund", []byte("re_123"))
	mustRecord(t, s, r.id, "charge", []byte("ch_1"))
	mustRecord(t, s, other.id, "charge", []byte("ch_2"))
	before := time.Now()
	got, err := l.ListPhases(ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "charge" || got[0].Bytes != 4 || got[1].Name != "refund" || got[1].Bytes != 6 {
		t.Fatalf("ListPhases = %+v, want charge (4 bytes) and refund (6 bytes)", got)
	}
	for _, p := range got {
		if !p.ExpiresAt.After(before) {
			t.Errorf("phase %s expires at %v, before it was listed", p.Name, p.ExpiresAt)
		}
	}
	if none, err := l.ListPhases(ctx, newRequest("k3").id); err != nil || len(none) != 0 {
		t.Fatalf("ListPhases of an identity without phases = %+v, %v", none, err)
	}
}
