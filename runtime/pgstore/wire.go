package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A handler runs SQL on the session that later requests share, and a
// statement pgx has prepared runs by its name: a handler that drops one
// and prepares its own under the name from SQL (DEALLOCATE, then PREPARE)
// has its own statement run in its place, by whoever runs that statement
// next on the connection. The statements that end a transaction and reset
// its session are therefore sent as protocol messages of pgstore's own,
// not through pgx's batch: each of its statements prepared once per
// connection under a name of pgstore's (ownName), and behind them, in the
// same round trip, replacedSQL, parsed afresh as the unnamed statement,
// which no handler can have replaced. A session where it finds a statement
// prepared from SQL under a name that pgx, PgBouncer or pgstore runs is
// closed, not pooled, whatever else the statements before it answered:
// any of them may have been the handler's. The full reset, sent only when
// the check finds more to undo, is parsed afresh too.

// replacedSQL answers whether a statement prepared from SQL stands under a
// name that pgx's statement cache, PgBouncer or pgstore runs.
const replacedSQL = `SELECT EXISTS (SELECT FROM pg_prepared_statements WHERE from_sql AND ` + driverNameSQL + `)`

// errStatementReplaced is why a session where replacedSQL found a
// replaced statement is closed.
var errStatementReplaced = errors.New("a handler prepared a statement from SQL under a name of the driver's or pgstore's; the session is not reused")

// ownPrefix starts the names of pgstore's own prepared statements.
const ownPrefix = "idemgen_"

// ownName is the name under which pgstore prepares sql on a connection.
func ownName(sql string) string {
	sum := sha256.Sum256([]byte(sql))
	return ownPrefix + hex.EncodeToString(sum[:12])
}

// queueOwn queues q on b as pgstore's own prepared statement, preparing it
// on pc first if this connection has not yet (a round trip, once per
// connection and statement). Its results come back in text.
func queueOwn(ctx context.Context, pc *pgx.Conn, b *pgconn.Batch, q *pgx.QueuedQuery) error {
	sd, err := pc.Prepare(ctx, ownName(q.SQL), q.SQL)
	if err != nil {
		return err
	}
	if len(q.Arguments) != len(sd.ParamOIDs) {
		return fmt.Errorf("%d arguments for %d parameters", len(q.Arguments), len(sd.ParamOIDs))
	}
	m := pc.TypeMap()
	values := make([][]byte, len(q.Arguments))
	formats := make([]int16, len(q.Arguments))
	for i, arg := range q.Arguments {
		oid := sd.ParamOIDs[i]
		formats[i] = m.FormatCodeForOID(oid)
		// Encode appends to the buffer it is given and returns nil for
		// NULL: an empty value must be appended to a buffer that is not
		// nil, or it would be sent as NULL.
		if values[i], err = m.Encode(oid, formats[i], arg, []byte{}); err != nil {
			return fmt.Errorf("argument %d: %w", i+1, err)
		}
	}
	b.ExecStatement(sd, values, formats, nil)
	return nil
}

// sentResults are the results of a batch, one per statement that ran, and
// the error that ended it, if any: PostgreSQL runs nothing of a pipeline
// after a statement fails.
type sentResults struct {
	results []*pgconn.Result
	err     error
}

func readBatch(mrr *pgconn.MultiResultReader) sentResults {
	var r sentResults
	for mrr.NextResult() {
		r.results = append(r.results, mrr.ResultReader().Read())
	}
	r.err = mrr.Close()
	return r
}

// at returns the result of statement i and its error.
func (r sentResults) at(i int) (*pgconn.Result, error) {
	if i < len(r.results) {
		return r.results[i], r.results[i].Err
	}
	if r.err != nil {
		return nil, r.err
	}
	return nil, errors.New("the statement did not run")
}

// boolAt returns column col of the single row of statement i, a boolean
// in text.
func (r sentResults) boolAt(i, col int) (bool, error) {
	res, err := r.at(i)
	if err != nil {
		return false, err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) <= col {
		return false, fmt.Errorf("%d rows where one of at least %d columns was due", len(res.Rows), col+1)
	}
	return string(res.Rows[0][col]) == "t", nil
}

// sendReset sends resetSQL and reseedSQL, each parsed afresh, behind a
// ROLLBACK when rollback is set, in one round trip.
func sendReset(ctx context.Context, pc *pgx.Conn, rollback bool) error {
	b := &pgconn.Batch{}
	if rollback {
		b.ExecParams(rollbackSQL, nil, nil, nil, nil)
	}
	for _, q := range resetSQL {
		b.ExecParams(q, nil, nil, nil, nil)
	}
	b.ExecParams(reseedSQL, [][]byte{[]byte(strconv.FormatFloat(newSeed(), 'g', -1, 64))}, nil, nil, nil)
	return readBatch(pc.PgConn().ExecBatch(ctx, b)).err
}
