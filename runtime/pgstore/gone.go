package pgstore

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// A handler that runs SQL can DEALLOCATE a statement that pgx's cache or
// pgstore prepared on its connection, and nothing on the session shows
// what is no longer there: the next request's use of the statement on
// that connection fails. So does its use of a statement that the handler
// had pgx prepare through a temporary view of other column types, once
// the view is gone. pgx forgets every statement of a query or batch that
// failed, and such a statement ran nothing, so a claim, a transaction's
// begin, a completion and a release are sent once more when that is why
// they failed (againIfGone), and the second time pgx prepares them
// afresh. The statements that end a transaction cannot be: the
// transaction aborted with them. A keyless one's connection is closed
// instead (tx.giveBackAfter); a keyed one is settled, which closes it
// too.

// againIfGone runs f, and runs it again when its first run met a prepared
// statement that is not there, or not as it was prepared (statementGone).
func againIfGone[T any](f func() (T, error)) (T, error) {
	v, err := f()
	if statementGone(err) {
		return f()
	}
	return v, err
}

// statementGone reports whether err is PostgreSQL's answer to the use of a
// prepared statement that does not exist (invalid_sql_statement_name), or
// whose result's type is no longer the one it was prepared with (a
// handler had it prepared through a temporary view of other column
// types, gone since: "cached plan must not change result type").
func statementGone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == sqlstateNoStatement || pgErr.Code == sqlstateStalePlan)
}
