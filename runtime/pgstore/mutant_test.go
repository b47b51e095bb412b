//go:build mutants

package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// TestMutants runs the mutation run on the store: every mutant must fail
// the conformance suite and the model-based test, those that break
// transactional claims the transactional suite too, and one that breaks
// recovery points the phase suite. Stores of its own
// keep a kind of a handler's session state for the next request (their
// reset skips DISCARD SEQUENCES, SET SESSION AUTHORIZATION DEFAULT or
// UNLISTEN *), or end a handler's transaction at a statement they
// answer as refused, which the transactional suite must catch.
func TestMutants(t *testing.T) {
	testURL(t)
	cases := mutant.Cases(mutant.All(), mutant.Conformance, mutant.ConformanceTx, mutant.Model, mutant.Phases)
	for _, skip := range []struct{ name, what, stmt string }{
		{"reset-skips-sequences", "what currval and lastval remember", "DISCARD SEQUENCES"},
		{"reset-skips-session-authorization", "a session authorization a handler set, and the role and privileges that come with it", "SET SESSION AUTHORIZATION DEFAULT"},
		{"reset-skips-unlisten", "the channels a handler listens to, and the notifications sent to them", "UNLISTEN *"},
	} {
		cases = append(cases, mutant.Case{
			Mutant: mutant.Mutant{
				Name: skip.name,
				What: "the session reset leaves " + skip.what + " to the next request (" + skip.stmt + " skipped)",
			},
			Break:    func() { pgstore.SkipReset(skip.stmt) },
			Checkers: []mutant.Checker{mutant.ConformanceTx},
		})
	}
	cases = append(cases, mutant.Case{Mutant: refusalEndsTx, Checkers: []mutant.Checker{mutant.ConformanceTx}})
	mutant.Run(t, target(), cases)
}

// refusalEndsTx answers a handler's statement that would end its
// transaction with pgstore's refusal, but ends the transaction as a
// ROLLBACK sent to the server would: what the handler wrote before it is
// gone, and each statement the handler runs after it commits on its own,
// outside any transaction, while the request still fails. A store that
// looked for the ending statement only after sending it would do this.
var refusalEndsTx = mutant.Mutant{
	Name: "refusal-ends-tx",
	What: "a handler's statement that would end its transaction is answered as refused but ends it: each statement after it commits on its own though the request fails",
	Wrap: func(s idemstore.Store) idemstore.Store {
		ps, ok := s.(*pgstore.Store)
		if !ok {
			return nil
		}
		return refusalStore{ps}
	},
	Tx: true,
}

// refusalStore is a pgstore.Store whose transactions' drivers are
// refusalDrivers.
type refusalStore struct{ *pgstore.Store }

func (s refusalStore) ClaimTx(ctx context.Context, c idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	res, tx, err := s.Store.ClaimTx(ctx, c)
	if tx == nil {
		return res, nil, err
	}
	return res, refusalTx{tx, &refusalDriver{Tx: tx.Driver().(pgx.Tx), s: s.Store}}, err
}

func (s refusalStore) Begin(ctx context.Context, lease time.Duration) (idemstore.Tx, error) {
	tx, err := s.Store.Begin(ctx, lease)
	if err != nil {
		return nil, err
	}
	return refusalTx{tx, &refusalDriver{Tx: tx.Driver().(pgx.Tx), s: s.Store}}, nil
}

// refusalTx is a transaction whose driver is d.
type refusalTx struct {
	idemstore.Tx
	d *refusalDriver
}

func (t refusalTx) Driver() any { return pgx.Tx(t.d) }

// refusalDriver is a handler's pgx.Tx that, once a statement of the
// handler's was refused as ending the transaction, runs each later Exec
// in a transaction of its own and commits it.
type refusalDriver struct {
	pgx.Tx
	s       *pgstore.Store
	refused atomic.Bool
}

func (d *refusalDriver) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !d.refused.Load() {
		tag, err := d.Tx.Exec(ctx, sql, args...)
		if errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
			d.refused.Store(true)
		}
		return tag, err
	}
	tx, err := d.s.Begin(ctx, time.Minute)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := tx.Driver().(pgx.Tx).Exec(ctx, sql, args...)
	if err != nil {
		return tag, errors.Join(err, tx.Rollback(ctx))
	}
	return tag, tx.Commit(ctx, idemstore.Response{})
}
