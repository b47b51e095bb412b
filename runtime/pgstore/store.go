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
//
// The pool must use a query execution mode that describes statements: pgx's
// default (QueryExecModeCacheStatement) or QueryExecModeCacheDescribe. The
// claim's result carries a record that is readable only in the binary
// format; the exec and simple_protocol modes send and receive text without
// the types.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// Store is an idempotency store backed by a PostgreSQL pool. It implements
// idemstore.Store, idemstore.Transactor and idemstore.Sweeper.
type Store struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	// unusable is set when the pool cannot run pgstore's statements; every
	// claim then fails with it, so the engine refuses work (503) and logs
	// why, instead of failing on each request in a confusing way.
	unusable error
	// describes is set for a pool in cache_describe mode (cached.go).
	describes bool
	// guard holds the keys of won transactional claims where their
	// handlers cannot let go of them (guard.go).
	guard *guard
	// guardConnect opens the guard's connection; nil for the pool's
	// configuration.
	guardConnect func(context.Context) (*pgx.Conn, error)
	// phases is the pool that records phases (phase.go).
	phases phasePool
	// roleSeen is set once the store has looked at the role of its
	// first connection (warnSuperuser).
	roleSeen atomic.Bool
	// inheritedSeen is set once Sweep has logged a store table's
	// inheritance child.
	inheritedSeen atomic.Bool
}

// ErrInheritedTable is returned by Sweep while a store table has an
// inheritance child: the store's functions as a process of an earlier
// release's Migrate puts them back read the key table without ONLY, and
// their sweep would delete a live key for an expired row of the same key
// in the child. Keep an archive of a store table in a table of its own
// (CREATE TABLE ... (LIKE ...)), not one that inherits.
var ErrInheritedTable = errors.New("pgstore: sweep: a store table has an inheritance child (pg_inherits); the sweep is refused until it is gone")

// ErrQueryExecMode reports a pool whose query execution mode sends and
// receives text without types (exec, simple_protocol), which pgstore's
// statements cannot work with. Use pgx's default, cache_statement, or
// cache_describe (which also suits PgBouncer in transaction mode).
var ErrQueryExecMode = errors.New("pgstore: the pool's default_query_exec_mode must be cache_statement or cache_describe")

var (
	_ idemstore.Store      = (*Store)(nil)
	_ idemstore.Transactor = (*Store)(nil)
	_ idemstore.Sweeper    = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithLogger sets the logger for problems that cannot be returned to a
// caller, such as a failed rollback while a transaction is being given up.
// The default discards them.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) { s.logger = l }
}

// WithGuardConnect sets how the store opens the connection that holds
// the guards of its transactional claims (docs/runtime.md, "Transactional
// mode"). The guards are session-level locks, so that connection must be a
// session of its own: behind a pooler in transaction mode (PgBouncer's
// pool_mode=transaction), connect it directly to PostgreSQL or through a
// session-mode pool. The default connects with the pool's configuration
// and its BeforeConnect, AfterConnect and PrepareConn hooks.
func WithGuardConnect(connect func(context.Context) (*pgx.Conn, error)) Option {
	return func(s *Store) { s.guardConnect = connect }
}

// New returns a store that uses pool. The schema must already exist (see
// Migrate). The claim needs READ COMMITTED; pgstore asks for it explicitly
// where it opens transactions, and otherwise runs each statement on its own.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	s.guard = newGuard(pool, s.guardConnect, s.logger)
	mode := pool.Config().ConnConfig.DefaultQueryExecMode
	s.describes = mode == pgx.QueryExecModeCacheDescribe
	switch mode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
		s.unusable = fmt.Errorf("%w, not %s", ErrQueryExecMode, mode)
	}
	return s
}

// Claim atomically claims c.Identity in one round trip. The wait for a
// pooled connection ends with the wait context (idemstore.WithWait) too.
func (s *Store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	return againIfGone(func() (idemstore.Result, error) { return s.claim(ctx, c) })
}

func (s *Store) claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	if err := c.Check(); err != nil {
		return idemstore.Result{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	if s.unusable != nil {
		return idemstore.Result{}, s.unusable
	}
	conn, err := s.acquire(ctx)
	if err != nil {
		return idemstore.Result{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	defer conn.Release()
	rows, err := conn.Query(ctx, claimSQL, claimArgs(c, false)...)
	if err != nil {
		return idemstore.Result{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	res, outcome, err := readClaim(rows, c)
	if err == nil {
		res, err = s.answerHeld(ctx, conn, c, outcome, res)
	}
	if err != nil {
		return idemstore.Result{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	return res, nil
}

// Complete stores resp for the claim held with token, or returns
// idemstore.ErrFenced.
func (s *Store) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	tag, err := againIfGone(func() (pgconn.CommandTag, error) {
		return s.pool.Exec(ctx, completeSQL, completeArgs(id, token, resp)...)
	})
	if err != nil {
		return fmt.Errorf("pgstore: complete: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return idemstore.ErrFenced
	}
	return nil
}

// Release deletes the claim held with token, or returns idemstore.ErrFenced.
func (s *Store) Release(ctx context.Context, id idemstore.Identity, token string) error {
	return s.fencedExec(ctx, "release", releaseSQL, id, token)
}

// Abandon applies mode to the claim held with token at once, or returns
// idemstore.ErrFenced.
func (s *Store) Abandon(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error {
	switch mode {
	case idemstore.Takeover:
		return s.fencedExec(ctx, "abandon", abandonTakeoverSQL, id, token)
	case idemstore.FailClosed:
		return s.fencedExec(ctx, "abandon", abandonFailClosedSQL, id, token)
	default:
		return fmt.Errorf("pgstore: abandon: unknown lease-expiry mode %q", mode)
	}
}

func (s *Store) fencedExec(ctx context.Context, what, sql string, id idemstore.Identity, token string) error {
	tag, err := againIfGone(func() (pgconn.CommandTag, error) {
		return s.pool.Exec(ctx, sql, id.Tenant, id.Scope, id.Key, token)
	})
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return idemstore.ErrFenced
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
	if n < 0 {
		if !s.inheritedSeen.Swap(true) {
			s.logger.LogAttrs(ctx, slog.LevelError, "pgstore: a store table has an inheritance child; the sweeper deletes nothing until it is gone")
		}
		return 0, ErrInheritedTable
	}
	if int(n) >= limit {
		return int(n), nil
	}
	p, err := s.sweepPhases(ctx, limit-int(n))
	return int(n) + p, err
}

// claimArgs are claimSQL's arguments; hold asks a won claim to keep its
// locks at session level too (transactional mode).
func claimArgs(c idemstore.Claim, hold bool) []any {
	return []any{
		c.Tenant, c.Scope, c.Key, c.Operation, fingerprintArg(c.Fingerprint), c.Token,
		c.Lease.Microseconds(), c.TTL.Microseconds(),
		c.OnLeaseExpiry == idemstore.Takeover, hold,
	}
}

// fingerprintArg sends a nil fingerprint as an empty one: the column is NOT
// NULL, and an empty fingerprint is still a value.
func fingerprintArg(fp []byte) []byte {
	if fp == nil {
		return []byte{}
	}
	return fp
}

func completeArgs(id idemstore.Identity, token string, resp idemstore.Response) []any {
	body := resp.Body
	if resp.Omitted {
		body = nil
	}
	return []any{id.Tenant, id.Scope, id.Key, token, int32(resp.Status), headerwire.Encode(resp.Header), body, resp.Omitted}
}

func isFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateFenced
}

// acquire takes a pooled connection for a claim, waiting no longer than
// the wait context carried by ctx (idemstore.WithWait) allows: a claim
// whose client has left stops waiting with idemstore.ErrWaitEnded, having
// sent nothing.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	wctx, stop := idemstore.WaitContext(ctx)
	defer stop()
	conn, err := s.pool.Acquire(wctx)
	if err != nil && idemstore.WaitEnded(wctx) {
		return nil, idemstore.ErrWaitEnded
	}
	if err == nil && !s.roleSeen.Load() {
		s.warnSuperuser(ctx, conn.Conn().PgConn())
	}
	return conn, err
}

// warnSuperuser logs one WARN line, the first time a claim takes a
// connection, when the role the connection logged in as is a superuser.
// The isolation of a handler's transaction (docs/semantics.md §7.2)
// assumes it is not: a superuser's handler can switch off PostgreSQL's
// counting of its writes (track_counts) and on again, so that the checks
// of its transaction's end miss what it wrote to the store's tables, or
// reach past its transaction altogether (dblink, COPY … TO PROGRAM).
// PostgreSQL reports is_superuser to every connection as it starts (and
// again after a SET ROLE), so the check costs no round trip. Only a
// superuser is looked for: the isolation rests on no row security policy
// nor trigger, so a role with BYPASSRLS loses nothing of it, nor does
// one that may set session_replication_role (which silences triggers and
// rules); a role granted SET on track_counts (PostgreSQL 15's GRANT SET
// ON PARAMETER) can switch the counting off too, and finding it would
// take a query: docs/runtime.md tells the operator not to grant it. A
// pooler that does not pass is_superuser on gets no line.
func (s *Store) warnSuperuser(ctx context.Context, conn *pgconn.PgConn) {
	if !s.roleSeen.CompareAndSwap(false, true) || conn.ParameterStatus("is_superuser") != "on" {
		return
	}
	s.logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: the database role is a superuser; a handler's transaction can switch off the counting of its writes or reach past the transaction, so it is not isolated",
		slog.String("role", conn.ParameterStatus("session_authorization")))
}
