package mutant

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// Mutant is one deliberately broken version of a store, made by wrapping
// the real store: every call passes through except those the mutant
// changes.
type Mutant struct {
	// Name names the mutant in test names and in docs/verification.md.
	Name string
	// What says how it is broken.
	What string
	// Wrap returns s broken this way; it keeps s an idemstore.Transactor
	// and an idemstore.Sweeper when s is one. It returns nil when the
	// mutant does not apply to s.
	Wrap func(s idemstore.Store) idemstore.Store
	// Tx: it breaks transactional claims (ClaimTx, a transaction's
	// Commit) too, so the transactional suite must catch it.
	Tx bool
}

// The mutants every store is run broken by.
var (
	CommitThenError = Mutant{
		Name: "commit-then-error",
		What: "Complete and a transaction's Commit do their work, then report an error, one call in three",
		Wrap: commitThenError,
		Tx:   true,
	}
	CompleteWithoutFence = Mutant{
		Name: "complete-without-fence",
		What: "Complete, Release and Abandon with a lease token that is no longer current act with the key's current one",
		Wrap: completeWithoutFence,
	}
	ReleaseCompleted = Mutant{
		Name: "release-completed",
		What: "Release of a key whose claim has completed deletes the completed row",
		Wrap: releaseCompleted,
	}
	LoseUpdate = Mutant{
		Name: "lose-update",
		What: "a completion is reported stored and is lost: Complete writes nothing, a transaction's Commit rolls back",
		Wrap: loseUpdate,
		Tx:   true,
	}
	GuardNeverReleases = Mutant{
		Name: "guard-never-releases",
		What: "a key's guard is never let go: a claim that wins a key claimed before, or one of the keys whose guard an earlier holder leaked (one in eight), gives it back and reports it in flight",
		Wrap: guardNeverReleases,
		Tx:   true,
	}
	ShortLease = Mutant{
		Name: "short-lease",
		What: "a claim is stored with a tenth of the lease it asks for, so that a retry can take over a live claim early",
		Wrap: shortLease,
	}
)

// All lists the mutants of this package.
func All() []Mutant {
	return []Mutant{CommitThenError, CompleteWithoutFence, ReleaseCompleted, LoseUpdate, GuardNeverReleases, ShortLease}
}

// ByName returns the mutant of All named name.
func ByName(name string) (Mutant, error) {
	for _, m := range All() {
		if m.Name == name {
			return m, nil
		}
	}
	return Mutant{}, fmt.Errorf("mutant: no mutant %q", name)
}

// errAfterCommit is the error commitThenError reports for what it did.
var errAfterCommit = errors.New("mutant: an error reported after the write was done")

func commitThenError(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	var n atomic.Int64
	third := func() bool { return n.Add(1)%3 == 1 }
	complete := c.complete
	c.complete = func(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
		if err := complete(ctx, id, token, resp); err != nil || !third() {
			return err
		}
		return errAfterCommit
	}
	if commit := c.commit; commit != nil {
		c.commit = func(ctx context.Context, inner idemstore.Tx, resp idemstore.Response) error {
			if err := commit(ctx, inner, resp); err != nil || !third() {
				return err
			}
			return errAfterCommit
		}
	}
	return wrap(s, c)
}

// tokens remembers the newest lease token won for each key.
type tokens struct {
	mu     sync.Mutex
	newest map[idemstore.Identity]string
}

func (ts *tokens) won(id idemstore.Identity, token string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.newest[id] = token
}

func (ts *tokens) current(id idemstore.Identity) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.newest[id]
}

func completeWithoutFence(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	ts := &tokens{newest: map[idemstore.Identity]string{}}
	claim := c.claim
	c.claim = func(ctx context.Context, cl idemstore.Claim) (idemstore.Result, error) {
		res, err := claim(ctx, cl)
		if err == nil && res.Won {
			ts.won(cl.Identity, cl.Token)
		}
		return res, err
	}
	if claimTx := c.claimTx; claimTx != nil {
		c.claimTx = func(ctx context.Context, cl idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
			res, tx, err := claimTx(ctx, cl)
			if err == nil && res.Won {
				ts.won(cl.Identity, cl.Token)
			}
			return res, tx, err
		}
	}
	// unfenced calls do with token, and when it is fenced, again with the
	// key's current token.
	unfenced := func(id idemstore.Identity, token string, do func(token string) error) error {
		err := do(token)
		if cur := ts.current(id); errors.Is(err, idemstore.ErrFenced) && cur != "" && cur != token {
			return do(cur)
		}
		return err
	}
	complete, release, abandon := c.complete, c.release, c.abandon
	c.complete = func(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
		return unfenced(id, token, func(token string) error { return complete(ctx, id, token, resp) })
	}
	c.release = func(ctx context.Context, id idemstore.Identity, token string) error {
		return unfenced(id, token, func(token string) error { return release(ctx, id, token) })
	}
	c.abandon = func(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error {
		return unfenced(id, token, func(token string) error { return abandon(ctx, id, token, mode) })
	}
	return wrap(s, c)
}

// releaseCompleted applies to a store that is an idemadmin.Store, through
// which it deletes the row.
func releaseCompleted(s idemstore.Store) idemstore.Store {
	admin, ok := s.(idemadmin.Store)
	if !ok {
		return nil
	}
	c := newCalls(s)
	release := c.release
	c.release = func(ctx context.Context, id idemstore.Identity, token string) error {
		err := release(ctx, id, token)
		if !errors.Is(err, idemstore.ErrFenced) {
			return err
		}
		e, gerr := admin.Get(ctx, id)
		if gerr != nil || e.State != idemstore.StateCompleted {
			return err
		}
		return admin.Settle(ctx, e, nil)
	}
	return wrap(s, c)
}

func loseUpdate(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	c.complete = func(context.Context, idemstore.Identity, string, idemstore.Response) error { return nil }
	if c.commit != nil {
		c.commit = func(ctx context.Context, inner idemstore.Tx, _ idemstore.Response) error {
			return inner.Rollback(ctx)
		}
	}
	return wrap(s, c)
}

// leaked reports whether id is one of the keys whose guard an earlier
// holder leaked: one in eight, by a hash of the key.
func leaked(id idemstore.Identity) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id.Key))
	return h.Sum32()%8 == 0
}

func guardNeverReleases(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	var mu sync.Mutex
	guarded := map[idemstore.Identity]bool{}
	// busy reports whether the key's guard is held, and holds it.
	busy := func(id idemstore.Identity) bool {
		mu.Lock()
		defer mu.Unlock()
		was := guarded[id] || leaked(id)
		guarded[id] = true
		return was
	}
	inFlight := func(cl idemstore.Claim) idemstore.Result {
		return idemstore.Result{Existing: idemstore.Record{State: idemstore.StateInFlight, Operation: cl.Operation, Fingerprint: cl.Fingerprint}}
	}
	claim, release := c.claim, c.release
	c.claim = func(ctx context.Context, cl idemstore.Claim) (idemstore.Result, error) {
		res, err := claim(ctx, cl)
		if err != nil || !res.Won || !busy(cl.Identity) {
			return res, err
		}
		return inFlight(cl), release(ctx, cl.Identity, cl.Token)
	}
	if claimTx := c.claimTx; claimTx != nil {
		c.claimTx = func(ctx context.Context, cl idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
			res, tx, err := claimTx(ctx, cl)
			if err != nil || !res.Won || !busy(cl.Identity) {
				return res, tx, err
			}
			return inFlight(cl), nil, tx.Rollback(ctx)
		}
	}
	return wrap(s, c)
}

func shortLease(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	claim := c.claim
	c.claim = func(ctx context.Context, cl idemstore.Claim) (idemstore.Result, error) {
		cl.Lease /= 10
		return claim(ctx, cl)
	}
	return wrap(s, c)
}
