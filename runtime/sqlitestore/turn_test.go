package sqlitestore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The write turn goes to a waiting completion first, then to the claim
// whose key has waited longest: a retry whose earlier claim stopped
// waiting (its client left) keeps its key's place ahead of keys that
// began to wait after it, and a key decided meanwhile is forgotten.
func TestTurnServesTheLongestWaitingKey(t *testing.T) {
	var tr turn
	ctx := context.Background()
	old, young := idemstore.Identity{Key: "old"}, idemstore.Identity{Key: "young"}
	give, err := tr.take(ctx, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The old key's first claim waits, and its client leaves.
	gone, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := tr.take(gone, time.Second, &old); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim whose client left = %v, want its context's end", err)
	}
	got := make(chan string, 3)
	wait := func(name string, id *idemstore.Identity) {
		turned(t, got, name, func() (func(), error) { return tr.take(ctx, 5*time.Second, id) })
	}
	go wait("young", &young)
	time.Sleep(20 * time.Millisecond)
	go wait("old", &old)
	time.Sleep(20 * time.Millisecond)
	go wait("completion", nil)
	time.Sleep(20 * time.Millisecond)
	give()
	for _, want := range []string{"completion", "old", "young"} {
		if name := <-got; name != want {
			t.Errorf("the turn went to %q, want %q", name, want)
		}
	}

	tr.decided(old)
	if _, ok := tr.seen[old]; ok {
		t.Error("a decided key is still remembered")
	}
}

// A background writer (BeginTurn's: an outbox's runner) waits behind the
// claims that come after it, so that runners working through a backlog do
// not keep requests waiting; but once it has been passed over for
// passedOver it goes ahead of them, so that a storm of claims does not
// keep it waiting for as long as the storm lasts. A completion goes ahead
// of both.
func TestBackgroundWriterYieldsToClaimsForABoundedTime(t *testing.T) {
	for _, c := range []struct {
		name   string
		waited time.Duration
		want   []string
	}{
		{"fresh", 0, []string{"completion", "claim", "background"}},
		{"passed over", passedOver, []string{"completion", "background", "claim"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tr turn
			ctx := context.Background()
			give, err := tr.take(ctx, time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 3)
			go turned(t, got, "background", func() (func(), error) { return tr.takeBackground(ctx) })
			time.Sleep(c.waited)
			go turned(t, got, "claim", func() (func(), error) { return tr.take(ctx, 5*time.Second, &idemstore.Identity{Key: "k"}) })
			go turned(t, got, "completion", func() (func(), error) { return tr.take(ctx, 5*time.Second, nil) })
			time.Sleep(20 * time.Millisecond)
			give()
			for _, want := range c.want {
				if name := <-got; name != want {
					t.Errorf("the turn went to %q, want %q", name, want)
				}
			}
		})
	}
}

// turned waits for the turn with take and, once it has it, sends name to
// got and passes the turn on; it sends "" when take fails.
func turned(t *testing.T, got chan<- string, name string, take func() (func(), error)) {
	done, err := take()
	if err != nil {
		t.Error(err)
		got <- ""
		return
	}
	got <- name
	done()
}

// Claims under keys of their own that never decide (their clients hang
// up as they wait) fill the turn's memory of keys; every later waiting
// claim must not pay a walk of the whole memory for it. The memory is
// swept at most once every sweepEvery, and a key it has no room for waits
// without a remembered place.
func TestFullKeyMemoryIsNotSweptOnEveryClaim(t *testing.T) {
	var tr turn
	now := time.Now()
	for i := range maxSeen {
		tr.firstWait(idemstore.Identity{Key: "filler-" + strconv.Itoa(i)}, now)
	}
	for i := range 1000 {
		at := now.Add(time.Duration(i) * time.Millisecond)
		if got := tr.firstWait(idemstore.Identity{Key: "late-" + strconv.Itoa(i)}, at); !got.Equal(at) {
			t.Fatalf("a key with no room in the memory waits since %v, want %v", got, at)
		}
	}
	if tr.sweeps != 1 {
		t.Errorf("1,000 claims against a full memory swept it %d times, want 1", tr.sweeps)
	}
	later := now.Add(keyMemory)
	tr.firstWait(idemstore.Identity{Key: "after"}, later)
	if tr.sweeps != 2 || len(tr.seen) != 1 {
		t.Errorf("once the fillers are forgotten: %d sweeps, %d keys remembered; want 2 and 1", tr.sweeps, len(tr.seen))
	}
}
