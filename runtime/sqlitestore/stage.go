package sqlitestore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// ErrNoStaging is returned by StageEffect for a transaction that is not
// the one sqlitestore handed a keyed request's handler (Begin's keyless
// transaction among them, which stages nothing), and for an identity that
// is not the request's.
var ErrNoStaging = errors.New("sqlitestore: effects are staged only in the transaction of a keyed request, under its identity")

// stageEffect writes a staged effect in the handler's transaction; a
// second staging of one pending effect key inserts nothing (see
// pgstore's).
const stageEffect = `INSERT INTO main.idempotency_outbox
       (tenant, scope, key, effect_key, name, payload, next_attempt_at, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
ON CONFLICT (tenant, effect_key) WHERE state = 'pending' DO NOTHING`

// StageEffect inserts, in tx, the *Tx a transactional handler of a keyed
// request received from sqlitestore, the effect name under effectKey with
// payload into the outbox's table (idempotency_outbox) under id, the
// request's stored identity, staged at at. It reports whether a row was
// inserted: false when a pending effect with that effect key is there
// already. It is sqliteoutbox's Stage. A handler's own statements may not
// write the outbox's table (docs/semantics.md §7.2), so an effect always
// carries the identity of the request whose transaction wrote it
// (docs/semantics.md §8.3). It fails with ErrNoStaging outside a keyed
// request's transaction or for another identity, and as the handler's
// calls do once the transaction has been taken back from the handler.
func StageEffect(ctx context.Context, tx *Tx, id idemstore.Identity, effectKey, name string, payload []byte, at time.Time) (bool, error) {
	if tx == nil || tx.owner == nil || !tx.owner.held || tx.owner.id != id {
		return false, ErrNoStaging
	}
	c, err := tx.enter(ctx)
	if err != nil {
		return false, err
	}
	defer tx.leave()
	n, err := tx.owner.ownExec(c, stageEffect, id.Tenant, id.Scope, id.Key, effectKey, name, payload, at.UnixMilli())
	return n == 1, err
}

// ownExec runs query, one of the store's own statements, in the
// handler's transaction while the handler owns it, and returns the rows it
// changed. The authorizer lets it write the store's tables (storeWrites)
// and lets nothing else of the handler's do so meanwhile: it holds the
// transaction's driver connection from before the flag is set until
// after it is cleared, and database/sql runs every statement of the
// handler's (prepared or not, a row read, a goroutine's the handler left
// running) holding that connection too. Every other check of a handler's
// statement applies to it.
func (t *storeTx) ownExec(ctx context.Context, query string, args ...driver.Value) (n int64, err error) {
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rerr := t.conn.Raw(func(dc any) error {
		ex, ok := dc.(driver.ExecerContext)
		if !ok {
			err = fmt.Errorf("sqlitestore: the driver connection %T cannot execute", dc)
			return nil
		}
		t.storeWrites.Store(true)
		defer t.storeWrites.Store(false)
		res, xerr := ex.ExecContext(ctx, query, named)
		if xerr != nil {
			err = xerr
			return nil
		}
		n, err = res.RowsAffected()
		return nil
	})
	return n, errors.Join(rerr, err)
}
