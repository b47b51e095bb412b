package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// ErrNoStaging is returned by StageEffect for a transaction that is not
// the one pgstore handed a keyed request's handler (Begin's keyless
// transaction among them, which stages nothing), and for an identity that
// is not the request's.
var ErrNoStaging = errors.New("pgstore: effects are staged only in the transaction of a keyed request, under its identity")

// stageSQL writes a staged effect in the handler's transaction. The
// conflict target is the partial unique index of pending effects: a second
// staging of one effect key inserts nothing, and the caller says so,
// rather than raise an error that would abort the handler's transaction.
// %s is the table, named by its schema; every parameter is cast, so that
// the handler's session chooses no type. It returns the relation the row
// went to, which no handler's text can choose: only a row of the
// transaction's outbox is counted (StageEffect).
const stageSQL = `INSERT INTO %s (tenant, scope, key, effect_key, name, payload)
VALUES ($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.text, $5::pg_catalog.text, $6::pg_catalog.bytea)
ON CONFLICT (tenant, effect_key) WHERE state OPERATOR(pg_catalog.=) 'pending' DO NOTHING
RETURNING tableoid`

// staging is what a keyed transaction's end expects of the outbox: the
// rows StageEffect inserted into rel, the outbox the transaction began
// with (watchedSQL), under id, the claim's identity. Every insert into the
// outbox counts against it, whatever its fate (txWritesSQL), so a row the
// handler wrote otherwise, under any identity, fails the end's check.
type staging struct {
	id  idemstore.Identity
	rel uint32
	n   atomic.Int64
}

// StageEffect inserts, in tx, the pgx.Tx a transactional handler of a
// keyed request received from pgstore (or a savepoint of it), the
// effect name under effectKey with payload into table (the outbox's
// table named by its schema) under id, the request's stored identity. It
// reports whether a row was inserted: false when a pending effect with
// that effect key is there already. It is pgoutbox's Stage; the end of
// the transaction commits no outbox row but those it inserted, so an
// effect always carries the identity of the request whose transaction
// wrote it (docs/semantics.md §7.2, §8.3). It fails with ErrNoStaging
// outside a keyed request's transaction or for another identity.
func StageEffect(ctx context.Context, tx pgx.Tx, table pgx.Identifier, id idemstore.Identity, effectKey, name string, payload []byte) (bool, error) {
	h, ok := tx.(*handlerTx)
	if !ok || h.staging == nil || h.staging.id != id {
		return false, ErrNoStaging
	}
	rel, inserted, err := h.stage(ctx, fmt.Sprintf(stageSQL, table.Sanitize()), id, effectKey, name, payload)
	switch {
	case err != nil:
		return false, err
	case !inserted:
		return false, nil
	case rel != h.staging.rel:
		return false, fmt.Errorf("%w: %s is not the outbox the transaction began with", ErrNoStaging, table.Sanitize())
	}
	h.staging.n.Add(1)
	return true, nil
}

// stageTypes are the types of stageSQL's parameters.
var stageTypes = []uint32{pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.ByteaOID}

// stage runs sql, stageSQL for the outbox's table, as one of the
// handler's calls, and returns the relation its row went to and whether
// it inserted one. It is sent as pgstore's own message (execDirect), not
// through pgx's QueryRow: pgx would run instead a statement the handler
// prepared under sql as its name.
func (h *handlerTx) stage(ctx context.Context, sql string, id idemstore.Identity, effectKey, name string, payload []byte) (rel uint32, inserted bool, err error) {
	if !h.enter() {
		return 0, false, pgx.ErrTxClosed
	}
	defer h.calls.leave()
	res := execDirect(ctx, h.tx.Conn(), sql, stageTypes, id.Tenant, id.Scope, id.Key, effectKey, name, payload)
	switch {
	case res.Err != nil:
		return 0, false, res.Err
	case len(res.Rows) == 0:
		return 0, false, nil
	case len(res.Rows) != 1 || len(res.Rows[0]) != 1:
		return 0, false, fmt.Errorf("pgstore: stage: %d rows where one of one column was due", len(res.Rows))
	}
	oid, err := strconv.ParseUint(string(res.Rows[0][0]), 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("pgstore: stage: the relation %q: %w", res.Rows[0][0], err)
	}
	return uint32(oid), true, nil
}
