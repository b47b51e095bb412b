// Package memstore is an in-memory idemstore.Store for tests, demos and
// single-process tools. Keys live only as long as the process: a restart
// forgets every claim and every stored response, so it is no substitute for
// a database in production.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from now instead of time.Now, so
// that tests can move time forward without sleeping.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// Store keeps idempotency keys in a map guarded by one mutex. Every method
// decides and writes under that mutex, which is what makes a claim atomic.
// It implements idemstore.Store and idemstore.Sweeper.
type Store struct {
	now func() time.Time

	mu   sync.Mutex
	rows map[idemstore.Identity]*row
	// phases are the recorded phases (PhaseStore), made on the first.
	phases map[phaseID]phaseRow
}

// row is one stored key. Times are absolute instants of the store's clock.
type row struct {
	operation   string
	fingerprint []byte
	state       idemstore.State
	token       string
	leaseUntil  time.Time
	// failClosed is true when the claim that holds the row fails closed:
	// once its lease runs out the row becomes indeterminate, whatever the
	// mode of the claim that meets it.
	failClosed bool
	expiresAt  time.Time
	response   *idemstore.Response
}

var (
	_ idemstore.Store   = (*Store)(nil)
	_ idemstore.Sweeper = (*Store)(nil)
)

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, rows: make(map[idemstore.Identity]*row)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Claim implements idemstore.Store. The whole read-decide-write happens under the
// store's mutex, so two claims of one key can never both win.
func (s *Store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.Result{}, err
	}
	if err := c.Check(); err != nil {
		return idemstore.Result{}, fmt.Errorf("memstore: claim: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()

	r, ok := s.rows[c.Identity]
	if !ok || !r.expiresAt.After(now) {
		// Absent, or expired and therefore as good as absent: after its TTL
		// the same key is a new request, whatever it carried before.
		s.rows[c.Identity] = &row{
			operation:   c.Operation,
			fingerprint: bytes.Clone(c.Fingerprint),
			state:       idemstore.StateInFlight,
			token:       c.Token,
			leaseUntil:  now.Add(c.Lease),
			failClosed:  c.OnLeaseExpiry == idemstore.FailClosed,
			// A running lease never outlives its key (see takeover below).
			expiresAt: now.Add(max(c.TTL, c.Lease)),
		}
		return idemstore.Result{Won: true}, nil
	}

	sameRequest := r.operation == c.Operation && bytes.Equal(r.fingerprint, c.Fingerprint)
	if sameRequest && r.state == idemstore.StateInFlight && !r.leaseUntil.After(now) {
		// A takeover needs both claims to allow it: the row's holder may
		// have left effects that only it knew of.
		switch {
		case c.OnLeaseExpiry == idemstore.Takeover && !r.failClosed:
			// expires_at stays: a key lives ttl from its first claim, not
			// from the latest takeover; unless the new lease would outlive
			// it. An in-flight row with a running lease is never absent,
			// or a new claim would win while this holder still runs.
			r.token = c.Token
			r.leaseUntil = now.Add(c.Lease)
			if r.expiresAt.Before(r.leaseUntil) {
				r.expiresAt = r.leaseUntil
			}
			return idemstore.Result{Won: true, TookOver: true}, nil
		default:
			r.state = idemstore.StateIndeterminate
		}
	}
	return idemstore.Result{Existing: r.record(now)}, nil
}

// Complete implements idemstore.Store.
func (s *Store) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(id, token)
	if err != nil {
		return err
	}
	r.state = idemstore.StateCompleted
	r.response = copyResponse(&resp)
	if resp.Omitted {
		// An omitted body is never replayed, so none is kept.
		r.response.Body = nil
	}
	return nil
}

// Release implements idemstore.Store.
func (s *Store) Release(ctx context.Context, id idemstore.Identity, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.held(id, token); err != nil {
		return err
	}
	delete(s.rows, id)
	return nil
}

// Abandon implements idemstore.Store.
func (s *Store) Abandon(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if mode != idemstore.Takeover && mode != idemstore.FailClosed {
		return fmt.Errorf("memstore: abandon: unknown lease-expiry mode %q", mode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(id, token)
	if err != nil {
		return err
	}
	if mode == idemstore.Takeover {
		r.leaseUntil = s.now()
	} else {
		r.state = idemstore.StateIndeterminate
	}
	return nil
}

// Sweep implements idemstore.Sweeper.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	n := 0
	for id, r := range s.rows {
		if n == limit {
			break
		}
		if !r.expiresAt.After(now) && !r.leaseRunning(now) {
			delete(s.rows, id)
			n++
		}
	}
	return n + s.sweepPhases(now, limit-n), nil
}

// Len reports how many rows the store holds, expired ones included. It
// serves tests and metrics.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rows)
}

// leaseRunning reports whether r is in flight under a lease that has not run
// out: such a row is never swept, whatever its expiry says.
func (r *row) leaseRunning(now time.Time) bool {
	return r.state == idemstore.StateInFlight && r.leaseUntil.After(now)
}

// held returns the in-flight row that token currently holds. The caller
// holds s.mu.
func (s *Store) held(id idemstore.Identity, token string) (*row, error) {
	r, ok := s.rows[id]
	if !ok || r.token != token || r.state != idemstore.StateInFlight {
		return nil, idemstore.ErrFenced
	}
	return r, nil
}

// record copies r for a caller, who must never alias the store's slices.
func (r *row) record(now time.Time) idemstore.Record {
	rec := idemstore.Record{
		State:       r.state,
		Operation:   r.operation,
		Fingerprint: bytes.Clone(r.fingerprint),
		Response:    copyResponse(r.response),
	}
	if r.state == idemstore.StateInFlight && r.leaseUntil.After(now) {
		rec.LeaseRemaining = r.leaseUntil.Sub(now)
	}
	return rec
}

func copyResponse(resp *idemstore.Response) *idemstore.Response {
	if resp == nil {
		return nil
	}
	c := *resp
	c.Body = bytes.Clone(resp.Body)
	if resp.Header != nil {
		c.Header = make(http.Header, len(resp.Header))
		for k, v := range resp.Header {
			c.Header[k] = slices.Clone(v)
		}
	}
	return &c
}
