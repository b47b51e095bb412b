package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
)

// pgxQuerier is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Pgx adapts a pgx transaction, connection or pool to ledger.DB.
func Pgx(q pgxQuerier) ledger.DB { return pgxDB{q} }

type pgxDB struct{ q pgxQuerier }

func (d pgxDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := d.q.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (d pgxDB) QueryRow(ctx context.Context, query string, args ...any) ledger.Row {
	return pgxRow{d.q.QueryRow(ctx, query, args...)}
}

func (d pgxDB) Query(ctx context.Context, query string, args ...any) (ledger.Rows, error) {
	rows, err := d.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

type pgxRow struct{ r pgx.Row }

func (r pgxRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.ErrNoRows
	}
	return err
}

// sqlQuerier is what *sqlitestore.Tx, *sql.Tx, *sql.Conn and *sql.DB have
// in common.
type sqlQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL adapts a database/sql transaction, connection or handle on SQLite to
// ledger.DB. SQLite has no time type: times travel as RFC 3339 text in UTC,
// with a fixed number of fraction digits so that text order is time order.
func SQL(q sqlQuerier) ledger.DB { return sqlDB{q} }

type sqlDB struct{ q sqlQuerier }

// sqliteTimeFormat keeps microseconds, like PostgreSQL.
const sqliteTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

func sqliteArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if t, ok := a.(time.Time); ok {
			a = t.UTC().Format(sqliteTimeFormat)
		}
		out[i] = a
	}
	return out
}

func (d sqlDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := d.q.ExecContext(ctx, query, sqliteArgs(args)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (d sqlDB) QueryRow(ctx context.Context, query string, args ...any) ledger.Row {
	return sqlRow{d.q.QueryRowContext(ctx, query, sqliteArgs(args)...)}
}

func (d sqlDB) Query(ctx context.Context, query string, args ...any) (ledger.Rows, error) {
	rows, err := d.q.QueryContext(ctx, query, sqliteArgs(args)...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// scanTimes scans with scan, reading text into every *time.Time of dest.
func scanTimes(scan func(...any) error, dest []any) error {
	texts := map[int]*string{}
	d := make([]any, len(dest))
	for i, v := range dest {
		if _, ok := v.(*time.Time); ok {
			s := new(string)
			texts[i] = s
			d[i] = s
			continue
		}
		d[i] = v
	}
	if err := scan(d...); err != nil {
		return err
	}
	for i, s := range texts {
		t, err := time.Parse(time.RFC3339Nano, *s)
		if err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
		*dest[i].(*time.Time) = t
	}
	return nil
}

type sqlRow struct{ r *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	err := scanTimes(r.r.Scan, dest)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.ErrNoRows
	}
	return err
}

type sqlRows struct{ r *sql.Rows }

func (r sqlRows) Next() bool             { return r.r.Next() }
func (r sqlRows) Scan(dest ...any) error { return scanTimes(r.r.Scan, dest) }
func (r sqlRows) Err() error             { return r.r.Err() }
func (r sqlRows) Close()                 { _ = r.r.Close() }
