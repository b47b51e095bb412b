package pgstore

import (
	"bytes"
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

// sendOwn sends qs, then replacedSQL, in one round trip, and returns their
// results. A pool that caches statements by name (pgx's default,
// QueryExecModeCacheStatement) gets them as pgstore's own messages: qs as
// pgstore's prepared statements, replacedSQL as the unnamed one. A pool
// that describes each statement afresh (QueryExecModeCacheDescribe, the
// mode for a pooler that cannot keep named statements) prepares nothing by
// name that a handler could replace, and gets them as pgx's batch.
func sendOwn(ctx context.Context, pc *pgx.Conn, qs []*pgx.QueuedQuery) (sentResults, error) {
	if pc.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return sendBatch(ctx, pc, qs), nil
	}
	var ended *pgconn.Result
	if rollbackFirst(pc, qs) {
		// A failed transaction parses nothing but its end: its ROLLBACK
		// goes first, on its own, and the statements are prepared behind
		// it, as pgstore's, in the clean session.
		res, err := pc.PgConn().Exec(ctx, rollbackSQL).ReadAll()
		if err != nil {
			return sentResults{}, fmt.Errorf("rolling back before preparing: %w", err)
		}
		ended, qs = res[0], qs[1:]
	}
	b := &pgconn.Batch{}
	for _, q := range qs {
		if err := queueOwn(ctx, pc, b, q); err != nil {
			return sentResults{}, fmt.Errorf("preparing %.40q: %w", q.SQL, err)
		}
	}
	b.ExecParams(replacedSQL, [][]byte{[]byte(strconv.Itoa(len(ownPrepared(pc))))}, nil, nil, nil)
	sent := readBatch(pc.PgConn().ExecBatch(ctx, b))
	if ended != nil {
		sent.results = append([]*pgconn.Result{ended}, sent.results...)
	}
	return sent, nil
}

// rollbackFirst reports whether qs, which begin with ROLLBACK, must have it
// sent before the rest: pc's transaction has failed, where PostgreSQL
// refuses to parse anything but the statement that ends it (25P02), and
// one of the others is not yet prepared on pc. Once each is, the ROLLBACK
// goes in the one round trip with them.
func rollbackFirst(pc *pgx.Conn, qs []*pgx.QueuedQuery) bool {
	if len(qs) == 0 || qs[0].SQL != rollbackSQL || pc.PgConn().TxStatus() != 'E' {
		return false
	}
	for _, q := range qs[1:] {
		if !ownPrepared(pc)[ownName(q.SQL)] {
			return true
		}
	}
	return false
}

// ownPrepared is the set of the names of pgstore's own statements
// prepared on pc, kept with the connection.
func ownPrepared(pc *pgx.Conn) map[string]bool {
	data := pc.PgConn().CustomData()
	names, ok := data[ownPrefix].(map[string]bool)
	if !ok {
		names = map[string]bool{}
		data[ownPrefix] = names
	}
	return names
}

// sendBatch sends qs, then replacedSQL, as pgx's batch.
func sendBatch(ctx context.Context, pc *pgx.Conn, qs []*pgx.QueuedQuery) sentResults {
	b := &pgx.Batch{QueuedQueries: append(qs, &pgx.QueuedQuery{SQL: replacedSQL, Arguments: []any{0}})}
	br := pc.SendBatch(ctx, b)
	var r sentResults
	for range b.QueuedQueries {
		rows, err := br.Query()
		if err != nil {
			r.err = err
			break
		}
		res := &pgconn.Result{}
		for rows.Next() {
			var row [][]byte
			for _, v := range rows.RawValues() {
				row = append(row, bytes.Clone(v))
			}
			res.Rows = append(res.Rows, row)
		}
		rows.Close()
		res.CommandTag, res.Err = rows.CommandTag(), rows.Err()
		r.results = append(r.results, res)
		if res.Err != nil {
			break
		}
	}
	if err := br.Close(); r.err == nil {
		r.err = err
	}
	return r
}

// replacedSQL answers whether a statement prepared from SQL stands under a
// name that pgx's statement cache, PgBouncer or pgstore runs, or whether
// pgstore's own statements on the session are not the $1 that pgstore
// prepared there (ownPrepared): a handler that dropped one (DEALLOCATE)
// would have the next transaction's end on the connection, another
// tenant's, fail after its handler ran. It reads pg_prepared_statements
// once, both tests as aggregates of the one scan: PostgreSQL builds the
// view whole, texts and all, each time a statement reads it, and this
// statement is parsed afresh on every transaction's end (pgbench, one
// client, a session without other statements: 51-78 µs a statement where
// two reads took 95-96).
const replacedSQL = `SELECT COALESCE(pg_catalog.bool_or(from_sql AND ` + driverNameSQL + `), false)
       OR pg_catalog.count(*) FILTER (WHERE NOT from_sql AND name OPERATOR(pg_catalog.~~) 'idemgen\_%')
          OPERATOR(pg_catalog.<>) $1::pg_catalog.int8
  FROM pg_catalog.pg_prepared_statements`

// errStatementReplaced is why a session where replacedSQL found a
// replaced statement is closed.
var errStatementReplaced = errors.New("a handler prepared a statement from SQL under a name of the driver's or pgstore's; the session is not reused")

// queueReplan queues discardPlansSQL on b, and behind it, when pgstore
// has prepared sessionCheckSQL on pc, that statement, so that it parses
// again now, in the clean session: the check of the next transaction's
// end reads a check parsed after its transaction began as a sign that the
// handler made the statements parse again. Its answers are not read.
func queueReplan(b *pgconn.Batch, pc *pgx.Conn) {
	b.ExecParams(discardPlansSQL, nil, nil, nil, nil)
	if name := ownName(sessionCheckSQL); ownPrepared(pc)[name] {
		seed := strconv.FormatFloat(newSeed(), 'g', -1, 64)
		b.ExecPrepared(name, [][]byte{[]byte(pc.Config().User), []byte(seed), []byte("epoch"), []byte("0")}, nil, nil)
	}
}

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
	name := ownName(q.SQL)
	sd, err := pc.Prepare(ctx, name, q.SQL)
	if err != nil {
		return err
	}
	ownPrepared(pc)[name] = true
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
// in text or in binary.
func (r sentResults) boolAt(i, col int) (bool, error) {
	v, err := r.valueAt(i, col)
	return string(v) == "t" || (len(v) == 1 && v[0] == 1), err
}

// valueAt returns column col of the single row of statement i, nil for
// NULL.
func (r sentResults) valueAt(i, col int) ([]byte, error) {
	res, err := r.at(i)
	if err != nil {
		return nil, err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) <= col {
		return nil, fmt.Errorf("%d rows where one of at least %d columns was due", len(res.Rows), col+1)
	}
	return res.Rows[0][col], nil
}

// sendReset sends resetSQL and reseedSQL, each parsed afresh, behind a
// ROLLBACK when rollback is set and followed by discardPlansSQL when
// replan is (queueReplan), in one round trip.
func sendReset(ctx context.Context, pc *pgx.Conn, rollback, replan bool) error {
	b := &pgconn.Batch{}
	if rollback {
		b.ExecParams(rollbackSQL, nil, nil, nil, nil)
	}
	for _, q := range resetSQL {
		b.ExecParams(q, nil, nil, nil, nil)
	}
	b.ExecParams(reseedSQL, [][]byte{[]byte(strconv.FormatFloat(newSeed(), 'g', -1, 64))}, nil, nil, nil)
	if replan {
		queueReplan(b, pc)
	}
	return readBatch(pc.PgConn().ExecBatch(ctx, b)).err
}

// execDirect runs sql once on pc's session, parsed afresh as the unnamed
// statement, with args encoded by pgstore as the types oids name; its
// results come back in text. pgx's Exec, Query and QueryRow are not used
// for a statement of pgstore's on a session a handler has had: pgx runs,
// in place of any query whose text is the name of a statement prepared
// on the connection (Conn.Prepare), that statement, whatever the query's
// execution mode.
func execDirect(ctx context.Context, pc *pgx.Conn, sql string, oids []uint32, args ...any) *pgconn.Result {
	m := pc.TypeMap()
	values := make([][]byte, len(args))
	formats := make([]int16, len(args))
	for i, arg := range args {
		formats[i] = m.FormatCodeForOID(oids[i])
		v, err := m.Encode(oids[i], formats[i], arg, []byte{})
		if err != nil {
			return &pgconn.Result{Err: fmt.Errorf("argument %d: %w", i+1, err)}
		}
		values[i] = v
	}
	return pc.PgConn().ExecParams(ctx, sql, values, oids, formats, nil).Read()
}

// execPlain sends sql, statements without parameters, on pc's session as
// they are, in the simple protocol, not through pgx's Exec (see
// execDirect).
func execPlain(ctx context.Context, pc *pgx.Conn, sql string) error {
	_, err := pc.PgConn().Exec(ctx, sql).ReadAll()
	return err
}
