package sqlitestore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// blockingValue is an argument whose Value waits until release is closed:
// a value a handler computes late (a lookup, a key service without a
// deadline), or a hostile handler's.
type blockingValue struct {
	entered chan struct{}
	release chan struct{}
}

func (v blockingValue) Value() (driver.Value, error) {
	close(v.entered)
	<-v.release
	return "late", nil
}

// blockingScanner is a Scan destination that waits as blockingValue does.
type blockingScanner blockingValue

func (v blockingScanner) Scan(any) error {
	close(v.entered)
	<-v.release
	return nil
}

// hungCall is a handler's call on h that hangs in Go code database/sql
// runs, until v.release is closed.
type hungCall func(h *sqlitestore.Tx, v blockingValue) error

// The lease bounds a handler's transaction (docs/semantics.md §5.2: past
// it the store ends the transaction, and a retry can take the key over).
// The lease interrupts a statement that runs in SQLite, but not Go code,
// and database/sql runs an argument's driver.Valuer inside the call,
// holding the transaction's connection and its close lock: the rollback
// database/sql starts when the lease ends waited for that call, and the
// transaction, with SQLite's only write lock, stayed open for ever. No
// retry of the key, and no other writer of any process, could write. The
// store's Tx converts the arguments before the call, so a Value that hangs
// holds the handler alone, as a handler that hangs anywhere else does.
func TestAHungValuerDoesNotHoldTheWriteLockPastTheLease(t *testing.T) {
	holdsNothingPastTheLease(t, map[string]hungCall{
		"ExecContext": func(h *sqlitestore.Tx, v blockingValue) error {
			_, err := h.ExecContext(context.Background(), `INSERT INTO effects (marker) VALUES (?)`, v)
			return err
		},
		"QueryContext": func(h *sqlitestore.Tx, v blockingValue) error {
			rows, err := h.QueryContext(context.Background(), `INSERT INTO effects (marker) VALUES (?) RETURNING marker`, sql.Named("m", v))
			if err == nil {
				err = rows.Close()
			}
			return err
		},
		"QueryRowContext": func(h *sqlitestore.Tx, v blockingValue) error {
			var m string
			return h.QueryRowContext(context.Background(), `INSERT INTO effects (marker) VALUES (?) RETURNING marker`, v).Scan(&m)
		},
	})
}

// database/sql calls a sql.Scanner destination of Rows.Scan and Row.Scan
// holding the rows, and its rollback at the lease's end waits for the
// rows to close: a Scan that hangs held the transaction, with SQLite's
// only write lock, for ever. The store rolls the transaction back on its
// connection itself when database/sql has not.
func TestAHungScannerDoesNotHoldTheWriteLockPastTheLease(t *testing.T) {
	holdsNothingPastTheLease(t, map[string]hungCall{
		"Rows.Scan": func(h *sqlitestore.Tx, v blockingValue) error {
			rows, err := h.QueryContext(context.Background(), `SELECT marker FROM effects`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				if err := rows.Scan(blockingScanner(v)); err != nil {
					return err
				}
			}
			return rows.Err()
		},
		"Row.Scan": func(h *sqlitestore.Tx, v blockingValue) error {
			return h.QueryRowContext(context.Background(), `SELECT marker FROM effects`).Scan(blockingScanner(v))
		},
	})
}

// holdsNothingPastTheLease runs each call in a handler's transaction that
// has written a marker, hung until the lease has run out, and checks that
// the key's retry takes it over, that a write outside any request gets
// through, and that nothing of the transaction commits once the call
// goes on.
func holdsNothingPastTheLease(t *testing.T, calls map[string]hungCall) {
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, sqlitestore.WithLockWait(time.Second))
			ctx := context.Background()
			if _, err := s.DB().ExecContext(ctx, `CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			const lease = 300 * time.Millisecond
			claim := func(token string) idemstore.Claim {
				return idemstore.Claim{
					Identity:  idemstore.Identity{Tenant: "t", Scope: "createTransfer", Key: "k1"},
					Operation: "createTransfer", Fingerprint: make([]byte, 32), Token: token,
					Lease: lease, TTL: time.Hour, OnLeaseExpiry: idemstore.Takeover,
				}
			}
			res, tx, err := s.ClaimTx(ctx, claim("first"))
			if err != nil || !res.Won {
				t.Fatalf("first claim = %+v, %v", res, err)
			}
			h := tx.Driver().(*sqlitestore.Tx)
			if _, err := h.ExecContext(ctx, `INSERT INTO effects (marker) VALUES ('hung')`); err != nil {
				t.Fatal(err)
			}
			v := blockingValue{entered: make(chan struct{}), release: make(chan struct{})}
			returned := make(chan error, 1)
			released := false
			release := func() {
				if !released {
					released = true
					close(v.release)
					<-returned
				}
			}
			t.Cleanup(release) // before the store closes
			go func() { returned <- call(h, v) }()
			<-v.entered
			time.Sleep(lease + 500*time.Millisecond)

			// The lease has run out: the retry takes the key over.
			res2, tx2, err := s.ClaimTx(ctx, claim("retry"))
			if err != nil || !res2.Won {
				t.Errorf("the retry %v past the lease = %+v, %v; want it to take the key over", 500*time.Millisecond, res2, err)
			} else {
				_ = tx2.Rollback(ctx)
			}
			// Nor is a write outside any request held up.
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := s.DB().ExecContext(wctx, `INSERT INTO effects (marker) VALUES ('other')`); err != nil {
				t.Errorf("a write outside the transaction past its lease: %v", err)
			}
			release()
			_ = tx.Rollback(ctx)
			var hung int
			if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE marker <> 'other'`).Scan(&hung); err != nil {
				t.Fatal(err)
			}
			if hung != 0 {
				t.Errorf("%d of the hung transaction's writes committed", hung)
			}
		})
	}
}

// intValuer's Value returns an int, which is not a driver.Value.
type intValuer struct{}

func (intValuer) Value() (driver.Value, error) { return 7, nil }

// errValuer's Value fails.
type errValuer struct{}

func (errValuer) Value() (driver.Value, error) { return nil, errors.New("no value") }

// ptrValuer has Value on its value, so a nil *ptrValuer is a Valuer that
// database/sql reads as NULL.
type ptrValuer struct{ s string }

func (v ptrValuer) Value() (driver.Value, error) { return v.s, nil }

// The store's Tx converts a handler's arguments before the call, as
// database/sql would in it: every argument comes out as the same value,
// and every one it cannot convert fails with the same error, as on a
// plain *sql.Tx.
func TestHandlerArgumentsConvertAsDatabaseSQLDoes(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	n := 5
	var nilPtr *ptrValuer
	var nilInt *int
	type myInt int
	args := [][]any{
		{int64(1), "s", []byte("b"), 1.5, true, time.Unix(1, 0).UTC(), nil},
		{3, int8(-2), uint16(9), float32(2.5), myInt(4)},
		{&n, nilInt, ptrValuer{"v"}, &ptrValuer{"p"}, nilPtr},
		{sql.Named("a", ptrValuer{"named"}), sql.Named("b", 2)},
		{sql.NullString{String: "ns", Valid: true}, sql.NullInt64{}},
		{intValuer{}},
		{errValuer{}},
		{sql.Named("x", errValuer{})},
		{struct{}{}},
		{sql.Named("o", sql.Out{Dest: new(string)})},
	}
	for _, a := range args {
		query := "SELECT " + placeholders(len(a))
		plain, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, wantErr := selectRow(plain.QueryContext(ctx, query, a...))
		_ = plain.Rollback()

		tx, err := s.Begin(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		h := tx.Driver().(*sqlitestore.Tx)
		got, gotErr := selectRow(h.QueryContext(ctx, query, a...))
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("QueryContext(%v) = %v, %v; database/sql's is %v, %v", a, got, gotErr, want, wantErr)
		}
		_, execErr := h.ExecContext(ctx, query, a...)
		if fmt.Sprint(execErr) != fmt.Sprint(wantErr) {
			t.Errorf("ExecContext(%v) = %v; database/sql's is %v", a, execErr, wantErr)
		}
		row := make([]any, len(a))
		for i := range row {
			row[i] = new(any)
		}
		if rowErr := h.QueryRowContext(ctx, query, a...).Scan(row...); fmt.Sprint(rowErr) != fmt.Sprint(wantErr) {
			t.Errorf("QueryRowContext(%v).Scan = %v; database/sql's is %v", a, rowErr, wantErr)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// placeholders returns n of SQLite's ?NNN parameters, which take named
// arguments by position too.
func placeholders(n int) string {
	p := ""
	for i := range n {
		if i > 0 {
			p += ", "
		}
		p += fmt.Sprintf("?%d", i+1)
	}
	return p
}

// selectRow reads the one row of rows, each column with its Go type.
func selectRow(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return nil, rows.Err()
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = fmt.Sprintf("%T %v", v, v)
	}
	return out, rows.Err()
}

// The store's Tx converts a handler's arguments as database/sql does for a
// driver with no converter of its own: a driver.NamedValueChecker or a
// driver.ColumnConverter would be given the arguments as they are, and
// convert them otherwise. The driver has neither, on its connections or
// their statements.
func TestTheDriverHasNoArgumentConverter(t *testing.T) {
	s := openStore(t)
	conn, err := s.DB().Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		if _, ok := dc.(driver.NamedValueChecker); ok {
			t.Errorf("the driver's connection %T is a driver.NamedValueChecker", dc)
		}
		stmt, err := dc.(driver.Conn).Prepare(`SELECT ?`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		if _, ok := stmt.(driver.NamedValueChecker); ok {
			t.Errorf("the driver's statement %T is a driver.NamedValueChecker", stmt)
		}
		//lint:ignore SA1019 database/sql still consults it
		if _, ok := stmt.(driver.ColumnConverter); ok {
			t.Errorf("the driver's statement %T is a driver.ColumnConverter", stmt)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
