package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The subtests here open their store on a clock they move (Target.Open
// with a Clock), so that leases of a fraction of a second and TTLs of a
// day are checked without waiting for them.

// clockEpoch is where a store opened on a clock starts.
func clockEpoch() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }

// clocked is a store of a target opened on a clock the test moves.
type clocked struct {
	Instance
	clock *Clock
}

// openClocked opens a store of target on a clock that reads clockEpoch.
func openClocked(t *testing.T, target Target) clocked {
	t.Helper()
	c := clocked{clock: NewClock(clockEpoch())}
	c.Instance = target.Open(t, c.clock)
	c.advance(t, 0)
	return c
}

// advance moves the store's clock d forward.
func (c clocked) advance(t *testing.T, d time.Duration) {
	t.Helper()
	c.clock.Advance(d)
	if c.SetClock == nil {
		return
	}
	if err := c.SetClock(context.Background(), c.clock.Now()); err != nil {
		t.Fatalf("set the store's clock: %v", err)
	}
}

// finisher claims c, which must win, and stores resp as its answer: with
// Claim and Complete, or with ClaimTx and Commit.
type finisher func(t *testing.T, c idemstore.Claim, resp idemstore.Response)

// plainFinisher finishes a request with Claim and Complete.
func plainFinisher(s idemstore.Store) finisher {
	return func(t *testing.T, c idemstore.Claim, resp idemstore.Response) {
		t.Helper()
		mustWin(t, s, c)
		if err := s.Complete(context.Background(), c.Identity, c.Token, resp); err != nil {
			t.Fatalf("Complete(%q): %v", c.Key, err)
		}
	}
}

// txFinisher finishes a request with ClaimTx and Commit.
func txFinisher(s txStore) finisher {
	return func(t *testing.T, c idemstore.Claim, resp idemstore.Response) {
		t.Helper()
		tx := mustClaimTx(t, s, c)
		if err := tx.Commit(context.Background(), resp); err != nil {
			t.Fatalf("Commit(%q): %v", c.Key, err)
		}
	}
}

// wantReplay claims r, which must lose to its own completed row, and
// compares the replayed answer with want.
func wantReplay(t *testing.T, s idemstore.Store, r request, want idemstore.Response) {
	t.Helper()
	rec := mustLose(t, s, r.claim(), idemstore.StateCompleted)
	switch {
	case rec.Response == nil:
		t.Fatalf("%+v: the completed record has no response", r.id)
	case len(want.Body) > 1<<10:
		// A diff of a large body says nothing a length and a comparison
		// do not.
		if !bytes.Equal(rec.Response.Body, want.Body) {
			t.Errorf("%+v: the replayed body is %d bytes, not the %d stored (equal up to byte %d)",
				r.id, len(rec.Response.Body), len(want.Body), commonPrefix(rec.Response.Body, want.Body))
		}
		got, w := *rec.Response, want
		got.Body, w.Body = nil, nil
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%+v: the replayed response differs (-want +got):\n%s", r.id, diff)
		}
	default:
		if diff := cmp.Diff(want, *rec.Response); diff != "" {
			t.Errorf("%+v: the replayed response differs (-want +got):\n%s", r.id, diff)
		}
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// largeBody is a body of n bytes that repeats nowhere, with a NUL and
// bytes that are not UTF-8 among them.
func largeBody(n int) []byte {
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// largeBodySize is the size of the large body every store keeps whole:
// the 1 MiB a server reads of a body by default, and so about the largest
// answer a policy's MaxSnapshotBytes keeps in practice.
const largeBodySize = 1 << 20

// testLargeBody: a 1 MiB answer replays whole, byte for byte; a store
// that cut it at a column's or a value's size would replay a part.
func testLargeBody(t *testing.T, s idemstore.Store, finish finisher) {
	r := newRequest("k-large")
	want := sampleResponse()
	want.Body = largeBody(largeBodySize)
	finish(t, r.claim(), want)
	wantReplay(t, s, r, want)
}

// identityPairs are identities whose fields, read one after another,
// spell the same text: a separator shifts from one field to the next,
// or a field is empty. A store that kept them under their fields joined
// would keep each pair under one key.
func identityPairs() [][2]idemstore.Identity {
	id := func(tenant, scope, key string) idemstore.Identity {
		return idemstore.Identity{Tenant: tenant, Scope: scope, Key: key}
	}
	var pairs [][2]idemstore.Identity
	for _, sep := range []string{":", "/", "|", "\t", " ", ".", "-", "_"} {
		pairs = append(pairs,
			[2]idemstore.Identity{id("a", "s", "b"+sep+"c"), id("a"+sep+"b", "s", "c")},
			[2]idemstore.Identity{id("a", "s"+sep+"b", "c"), id("a", "s", "b"+sep+"c")},
			[2]idemstore.Identity{id("a"+sep+"s", "", "c"), id("a", "s", "c")},
			[2]idemstore.Identity{id("a"+sep, "s", "c"), id("a", sep+"s", "c")},
			[2]idemstore.Identity{id("", "s", "a"+sep+"c"), id("a", "s", sep+"c")},
			[2]idemstore.Identity{id("a", "", sep+"c"), id("a"+sep, "", "c")},
		)
	}
	return pairs
}

// testIdentityFields: identities whose fields joined would spell the same
// text are distinct keys. Each is finished with its own answer, and each
// replays its own.
func testIdentityFields(t *testing.T, s idemstore.Store, finish finisher) {
	seen := map[idemstore.Identity]bool{}
	var reqs []request
	for _, pair := range identityPairs() {
		for _, id := range pair {
			if !seen[id] {
				seen[id] = true
				r := newRequest(id.Key)
				r.id = id
				reqs = append(reqs, r)
			}
		}
	}
	for _, r := range reqs {
		finish(t, r.claim(), answerOf(fmt.Sprintf("%q", r.id)))
	}
	for _, r := range reqs {
		wantReplay(t, s, r, answerOf(fmt.Sprintf("%q", r.id)))
	}
}

// testLeaseFraction: a lease of 1.5 s or 2.5 s holds for all of it: a
// retry 1.2 s or 2.2 s in loses to the live claim, with the rest of the
// lease left, and one just past it takes over. A store that kept the
// lease in whole seconds would let the retry take over early.
func testLeaseFraction(t *testing.T, c clocked) {
	for i, lease := range []time.Duration{1500 * time.Millisecond, 2500 * time.Millisecond} {
		r := newRequest(fmt.Sprintf("k-fraction-%d", i))
		r.lease = lease
		mustWin(t, c.Store, r.claim())
		c.advance(t, lease-300*time.Millisecond)
		rec := mustLose(t, c.Store, r.claim(), idemstore.StateInFlight)
		if rec.LeaseRemaining <= 0 || rec.LeaseRemaining > 300*time.Millisecond {
			t.Errorf("lease %v, %v in: LeaseRemaining = %v, want in (0, 300ms]", lease, lease-300*time.Millisecond, rec.LeaseRemaining)
		}
		c.advance(t, 301*time.Millisecond)
		if res := mustWin(t, c.Store, r.claim()); !res.TookOver {
			t.Errorf("lease %v: the claim just past it won without taking over", lease)
		}
	}
}

// longTTLDay is a TTL of a day, longer than any cap a store might put on
// one.
const longTTLDay = 24 * time.Hour

// testLongTTL: a key with a day's TTL is kept through minutes and hours
// of its clock: a retry two minutes, an hour and twenty-three hours
// after the answer replays it, and one after the day is a new request. A
// store that capped the TTL would run the retry again.
func testLongTTL(t *testing.T, c clocked, finish finisher) {
	r := newRequest("k-day")
	r.ttl = longTTLDay
	want := sampleResponse()
	finish(t, r.claim(), want)
	for _, d := range []time.Duration{2 * time.Minute, time.Hour, 22*time.Hour - 2*time.Minute} {
		c.advance(t, d)
		wantReplay(t, c.Store, r, want)
	}
	c.advance(t, time.Hour+time.Second)
	r.body = `{"amount":1}`
	mustWin(t, c.Store, r.claim())
}

// testConcurrentTakeovers: many goroutines claim at once the same request
// on keys whose lease has just run out. Exactly one takes each key over;
// every other loses to it, in flight, and none errs. A takeover that read
// the abandoned row and wrote its own without a lock would let a claim
// that overlapped it win too.
//
// Calls over a network overlap in every round; calls to a store in the
// test's process (the memory store) take microseconds and overlap seldom,
// the less the busier the machine. So rounds go on until the claims that
// lost a key had begun, a hundred times, before its winner's call
// returned (at least two rounds, at most a thousand or ten seconds).
func testConcurrentTakeovers(t *testing.T, c clocked) {
	const goroutines, keys, wantOverlaps = 16, 12, 100
	type call struct {
		start, end time.Time
		won        bool
	}
	begin := time.Now()
	overlaps, round := 0, 0
	for ; round < 2 || overlaps < wantOverlaps && round < 1000 && time.Since(begin) < 10*time.Second; round++ {
		key := func(k int) string { return fmt.Sprintf("k-takeover-%d-%02d", round, k) }
		for k := range keys {
			r := newRequest(key(k))
			r.lease = time.Second
			mustWin(t, c.Store, r.claim())
		}
		c.advance(t, 1001*time.Millisecond)
		var (
			ta    tally
			wg    sync.WaitGroup
			calls = make([]call, keys*goroutines)
		)
		start := make(chan struct{})
		// A goroutine for each claim of each key, all let go at once, so
		// that the claims of a key overlap.
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				name := key(i / goroutines)
				calls[i].start = time.Now()
				res, err := c.Store.Claim(context.Background(), newRequest(name).claim())
				calls[i].end, calls[i].won = time.Now(), err == nil && res.Won
				ta.add(name, res, err)
			}()
		}
		close(start)
		wg.Wait()
		var all []string
		for k := range keys {
			all = append(all, key(k))
		}
		ta.report(t, all, "taken over, its lease just run out,")
		if t.Failed() {
			return
		}
		for k := range keys {
			mine := calls[k*goroutines : (k+1)*goroutines]
			var winner call
			for _, cl := range mine {
				if cl.won {
					winner = cl
				}
			}
			for _, cl := range mine {
				if !cl.won && cl.start.Before(winner.end) {
					overlaps++
				}
			}
		}
	}
	t.Logf("%d rounds, %d losing claims begun before the winner's returned", round, overlaps)
}

// answerOf is a response that names what it answers.
func answerOf(what string) idemstore.Response {
	resp := sampleResponse()
	resp.Status = http.StatusCreated
	resp.Body = fmt.Appendf(nil, `{"answers":%q}`, what)
	return resp
}
