// Package pgstore keeps idempotency keys in PostgreSQL through pgx/v5.
//
// The table and the functions it relies on come from the migration that
// idemgen generates (templates.Schema("postgres")), or from Migrate. Every
// claim, replay and conflict costs one round trip; a completion one more. In
// transactional mode (ClaimTx) the claim lives inside the handler's
// transaction: other requests meet a transaction-scoped advisory lock and
// answer "in flight" without waiting, a crashed request's claim vanishes
// with its transaction, and the completion is written in the same round
// trip as the COMMIT.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Store is an idempotency store backed by a PostgreSQL pool. It implements
// idem.Store, idem.Transactor and idem.Sweeper.
type Store struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
}

var (
	_ idem.Store      = (*Store)(nil)
	_ idem.Transactor = (*Store)(nil)
	_ idem.Sweeper    = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithLogger sets the logger for problems that cannot be returned to a
// caller, such as a failed rollback while a transaction is being given up.
// The default discards them.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) { s.logger = l }
}

// New returns a store that uses pool. The schema must already exist (see
// Migrate). The claim needs READ COMMITTED; pgstore asks for it explicitly
// where it opens transactions, and otherwise runs each statement on its own.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Claim atomically claims c.Identity in one round trip.
func (s *Store) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	if err := checkClaim(c); err != nil {
		return idem.Result{}, err
	}
	row := s.pool.QueryRow(ctx, claimSQL, claimArgs(c)...)
	res, err := scanClaim(row, c)
	if err != nil {
		return idem.Result{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	return res, nil
}

// Complete stores resp for the claim held with token, or returns
// idem.ErrFenced.
func (s *Store) Complete(ctx context.Context, id idem.Identity, token string, resp idem.Response) error {
	args, err := completeArgs(id, token, resp)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, completeSQL, args...); err != nil {
		if isFenced(err) {
			return idem.ErrFenced
		}
		return fmt.Errorf("pgstore: complete: %w", err)
	}
	return nil
}

// Release deletes the claim held with token, or returns idem.ErrFenced.
func (s *Store) Release(ctx context.Context, id idem.Identity, token string) error {
	return s.fencedExec(ctx, "release", releaseSQL, id, token)
}

// Abandon applies mode to the claim held with token at once, or returns
// idem.ErrFenced.
func (s *Store) Abandon(ctx context.Context, id idem.Identity, token string, mode idem.LeaseExpiry) error {
	switch mode {
	case idem.Takeover:
		return s.fencedExec(ctx, "abandon", abandonTakeoverSQL, id, token)
	case idem.FailClosed:
		return s.fencedExec(ctx, "abandon", abandonFailClosedSQL, id, token)
	default:
		return fmt.Errorf("pgstore: abandon: unknown lease-expiry mode %q", mode)
	}
}

func (s *Store) fencedExec(ctx context.Context, what, sql string, id idem.Identity, token string) error {
	tag, err := s.pool.Exec(ctx, sql, id.Tenant, id.Scope, id.Key, token)
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return idem.ErrFenced
	}
	return nil
}

// Sweep deletes at most limit expired keys. It skips rows that claims hold
// locked, so it never blocks a claim for longer than one bounded DELETE and
// may run from every replica at once.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	if err := s.pool.QueryRow(ctx, sweepSQL, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: sweep: %w", err)
	}
	return int(n), nil
}

// checkClaim rejects claims the database would store wrongly rather than
// refuse: a lease or TTL below a microsecond would round to zero.
func checkClaim(c idem.Claim) error {
	if c.Lease < time.Microsecond || c.TTL < time.Microsecond {
		return fmt.Errorf("pgstore: claim: lease (%v) and ttl (%v) must be at least 1µs", c.Lease, c.TTL)
	}
	if c.Token == "" {
		return errors.New("pgstore: claim: empty lease token")
	}
	return nil
}

func claimArgs(c idem.Claim) []any {
	fp := c.Fingerprint
	if fp == nil {
		// The column is NOT NULL; an empty fingerprint is still a value.
		fp = []byte{}
	}
	return []any{
		c.Tenant, c.Scope, c.Key, c.Operation, fp, c.Token,
		c.Lease.Microseconds(), c.TTL.Microseconds(),
		c.OnLeaseExpiry == idem.Takeover,
	}
}

// The outcomes idempotency_claim reports.
const (
	outcomeWon      = "won"
	outcomeTookOver = "took_over"
	outcomeLost     = "lost"
	outcomeMismatch = "mismatch"
	outcomeBusy     = "busy"
)

func scanClaim(row pgx.Row, c idem.Claim) (idem.Result, error) {
	var (
		outcome     string
		state       *string
		operation   *string
		fingerprint []byte
		remainingUS *int64
		status      *int32
		headers     []byte
		body        []byte
		omitted     *bool
	)
	if err := row.Scan(&outcome, &state, &operation, &fingerprint, &remainingUS,
		&status, &headers, &body, &omitted); err != nil {
		return idem.Result{}, err
	}
	switch outcome {
	case outcomeWon:
		return idem.Result{Won: true}, nil
	case outcomeTookOver:
		return idem.Result{Won: true, TookOver: true}, nil
	case outcomeBusy:
		// Another claimant holds the key's lock and its row is not visible
		// yet (a claim in progress, or a transactional claim whose
		// transaction is open). It is in flight; how long its lease has
		// left is unknown. It is reported as the caller's own request: a
		// row this claim cannot see cannot be compared.
		return idem.Result{Existing: idem.Record{
			State:       idem.StateInFlight,
			Operation:   c.Operation,
			Fingerprint: append([]byte(nil), c.Fingerprint...),
		}}, nil
	case outcomeLost, outcomeMismatch:
	default:
		return idem.Result{}, fmt.Errorf("unexpected claim outcome %q", outcome)
	}
	if state == nil || operation == nil {
		return idem.Result{}, fmt.Errorf("claim outcome %q without a row", outcome)
	}
	rec := idem.Record{
		State:       idem.State(*state),
		Operation:   *operation,
		Fingerprint: fingerprint,
	}
	if remainingUS != nil {
		rec.LeaseRemaining = time.Duration(*remainingUS) * time.Microsecond
	}
	if rec.State == idem.StateCompleted {
		resp := &idem.Response{Body: body}
		if status != nil {
			resp.Status = int(*status)
		}
		if omitted != nil {
			resp.Omitted = *omitted
		}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &resp.Header); err != nil {
				return idem.Result{}, fmt.Errorf("stored headers: %w", err)
			}
		}
		rec.Response = resp
	}
	return idem.Result{Existing: rec}, nil
}

func completeArgs(id idem.Identity, token string, resp idem.Response) ([]any, error) {
	var headers []byte
	if resp.Header != nil {
		var err error
		headers, err = json.Marshal(http.Header(resp.Header))
		if err != nil {
			return nil, fmt.Errorf("pgstore: complete: encode headers: %w", err)
		}
	}
	body := resp.Body
	if resp.Omitted {
		body = nil
	}
	return []any{id.Tenant, id.Scope, id.Key, token, int32(resp.Status), headers, body, resp.Omitted}, nil
}

func isFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateFenced
}
