package mutant

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

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
	// Phase: it breaks recovery points (idemstore.PhaseStore) alone, so
	// the phase suite must catch it, and no other can.
	Phase bool
	// Overlap: it shows only when calls overlap in time, which a suite
	// that makes one call at a time (the model) never does.
	Overlap bool
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
	LeaseInWholeSeconds = Mutant{
		Name: "lease-in-whole-seconds",
		What: "a lease of a second or more is stored in whole seconds, the fraction dropped (as EXPIRE or an integer column would), so that a retry takes over a 2.5 s claim after 2 s",
		Wrap: leaseInWholeSeconds,
		Tx:   true,
	}
	TTLCapped = Mutant{
		Name: "ttl-capped",
		What: "a key is kept at most a minute, whatever TTL its claim asks for, so that a retry a minute after a completed request runs it again",
		Wrap: ttlCapped,
		Tx:   true,
	}
	LargeBodyTruncated = Mutant{
		Name: "large-body-truncated",
		What: "a completion keeps at most 64 KiB of the response body (as a column or value of that size would) and reports it stored, so that a replay of a larger answer is cut short",
		Wrap: largeBodyTruncated,
		Tx:   true,
	}
	PhaseTTLCapped = Mutant{
		Name:  "phase-ttl-capped",
		What:  "a recovery point is kept at most a minute, whatever ttl it is recorded with, so that a retry a minute later runs the phase again",
		Wrap:  phaseTTLCapped,
		Phase: true,
	}
	RacyTakeover = Mutant{
		Name:    "racy-takeover",
		What:    "a takeover reads the abandoned row and writes its own without a lock: a claim of the same request that overlaps a takeover wins the key too, and completes it with the token the takeover wrote",
		Wrap:    racyTakeover,
		Overlap: true,
	}
	IdentityJoined = Mutant{
		Name: "identity-joined",
		What: "a key is stored under its tenant and key text joined with a colon, which either may hold, so that tenant a's key b:c is tenant a:b's key c",
		Wrap: identityJoined,
		Tx:   true,
	}
)

// All lists the mutants of this package.
func All() []Mutant {
	return []Mutant{CommitThenError, CompleteWithoutFence, ReleaseCompleted, LoseUpdate, GuardNeverReleases, ShortLease,
		LeaseInWholeSeconds, TTLCapped, LargeBodyTruncated, IdentityJoined, PhaseTTLCapped, RacyTakeover}
}

// ByName returns the mutant of All, or Unchanged, named name.
func ByName(name string) (Mutant, error) {
	for _, m := range append(All(), Unchanged) {
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

// claims applies change to every claim, plain and transactional, before
// the wrapped store sees it.
func claims(c *calls, change func(cl *idemstore.Claim)) {
	claim := c.claim
	c.claim = func(ctx context.Context, cl idemstore.Claim) (idemstore.Result, error) {
		change(&cl)
		return claim(ctx, cl)
	}
	if claimTx := c.claimTx; claimTx != nil {
		c.claimTx = func(ctx context.Context, cl idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
			change(&cl)
			return claimTx(ctx, cl)
		}
	}
}

func leaseInWholeSeconds(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	claims(c, func(cl *idemstore.Claim) {
		if cl.Lease >= time.Second {
			cl.Lease = cl.Lease.Truncate(time.Second)
		}
	})
	return wrap(s, c)
}

// ttlCap is the longest a ttlCapped store keeps a key.
const ttlCap = time.Minute

func ttlCapped(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	claims(c, func(cl *idemstore.Claim) { cl.TTL = min(cl.TTL, ttlCap) })
	return wrap(s, c)
}

// bodyCap is the most of a response body a largeBodyTruncated store keeps.
const bodyCap = 64 << 10

func largeBodyTruncated(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	cut := func(resp idemstore.Response) idemstore.Response {
		if len(resp.Body) > bodyCap {
			resp.Body = resp.Body[:bodyCap]
		}
		return resp
	}
	complete := c.complete
	c.complete = func(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
		return complete(ctx, id, token, cut(resp))
	}
	if commit := c.commit; commit != nil {
		c.commit = func(ctx context.Context, inner idemstore.Tx, resp idemstore.Response) error {
			return commit(ctx, inner, cut(resp))
		}
	}
	return wrap(s, c)
}

// joined is the identity an identityJoined store keeps id under: its
// tenant and key text joined with a colon as the key, under one tenant.
func joined(id idemstore.Identity) idemstore.Identity {
	return idemstore.Identity{Tenant: "joined", Scope: id.Scope, Key: id.Tenant + ":" + id.Key}
}

func identityJoined(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	claims(c, func(cl *idemstore.Claim) { cl.Identity = joined(cl.Identity) })
	complete, release, abandon := c.complete, c.release, c.abandon
	c.complete = func(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
		return complete(ctx, joined(id), token, resp)
	}
	c.release = func(ctx context.Context, id idemstore.Identity, token string) error {
		return release(ctx, joined(id), token)
	}
	c.abandon = func(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error {
		return abandon(ctx, joined(id), token, mode)
	}
	return wrap(s, c)
}

// phaseTTLCapped applies to an idemstore.PhaseStore.
func phaseTTLCapped(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	record := c.recordPhase
	if record == nil {
		return nil
	}
	c.recordPhase = func(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error) {
		return record(ctx, id, name, result, min(ttl, ttlCap))
	}
	return wrap(s, c)
}

// takeovers remembers, for racyTakeover, the last takeover won of each
// key, with the sequence number of its claim's end, and the token each
// claim that overlapped a takeover completes with.
type takeovers struct {
	mu  sync.Mutex
	seq int64
	won map[idemstore.Identity]takeover
	as  map[string]string
}

// takeover is a takeover won: the sequence number of its claim's end, and
// its token.
type takeover struct {
	end   int64
	token string
}

func (ts *takeovers) next() int64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.seq++
	return ts.seq
}

// tookOver records a takeover of id with token, whose claim ends now.
func (ts *takeovers) tookOver(id idemstore.Identity, token string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.seq++
	ts.won[id] = takeover{end: ts.seq, token: token}
}

// overlapped reports whether a takeover of id ended after a claim that
// started at start began, so that both read the abandoned row; if so, the
// claim's token completes with the takeover's.
func (ts *takeovers) overlapped(id idemstore.Identity, start int64, token string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	w, ok := ts.won[id]
	if !ok || w.end < start || w.token == token {
		return false
	}
	ts.as[token] = w.token
	return true
}

// token is the token a claim's completion uses.
func (ts *takeovers) token(token string) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if as, ok := ts.as[token]; ok {
		return as
	}
	return token
}

func racyTakeover(s idemstore.Store) idemstore.Store {
	c := newCalls(s)
	ts := &takeovers{won: map[idemstore.Identity]takeover{}, as: map[string]string{}}
	claim := c.claim
	c.claim = func(ctx context.Context, cl idemstore.Claim) (idemstore.Result, error) {
		start := ts.next()
		res, err := claim(ctx, cl)
		switch {
		case err != nil:
		case res.Won && res.TookOver:
			ts.tookOver(cl.Identity, cl.Token)
		case !res.Won && res.Existing.State == idemstore.StateInFlight &&
			bytes.Equal(res.Existing.Fingerprint, cl.Fingerprint) && res.Existing.Operation == cl.Operation &&
			ts.overlapped(cl.Identity, start, cl.Token):
			// This claim read the abandoned row beside the takeover, and
			// wrote its own over it.
			return idemstore.Result{Won: true, TookOver: true}, nil
		}
		return res, err
	}
	complete, release, abandon := c.complete, c.release, c.abandon
	c.complete = func(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
		return complete(ctx, id, ts.token(token), resp)
	}
	c.release = func(ctx context.Context, id idemstore.Identity, token string) error {
		return release(ctx, id, ts.token(token))
	}
	c.abandon = func(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error {
		return abandon(ctx, id, ts.token(token), mode)
	}
	return wrap(s, c)
}
