// Package ledger holds the payments service's business rules: accounts,
// transfers, pets and adoptions. It is written once against DB, a small
// interface that both a pgx transaction and a database/sql transaction are
// adapted to, so the same code runs inside the idempotency layer's
// transaction on PostgreSQL and on SQLite.
package ledger

import (
	"context"
	"errors"
)

// Dialect is the SQL dialect behind a DB. Both dialects accept $1-style
// placeholders (SQLite reads "$1" as a numbered parameter), so statements
// differ only where the databases do: row locks and insertion order.
type Dialect int

// The supported dialects.
const (
	Postgres Dialect = iota + 1
	SQLite
)

// String names the dialect as the migrations directory does.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "unknown"
}

// ErrNoRows is returned by Row.Scan when a query selected nothing. Adapters
// translate their driver's own sentinel to it.
var ErrNoRows = errors.New("ledger: no rows")

// DB is what the ledger needs from a connection or a transaction.
type DB interface {
	// Exec runs a statement and reports how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query expected to return at most one row.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Query runs a query returning rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Row is one result row; Scan returns ErrNoRows when there was none.
type Row interface {
	Scan(dest ...any) error
}

// Rows iterates over a query's result.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}
