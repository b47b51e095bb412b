package sqlitestore_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// target is the store to every suite of storetest: a new database file
// with the schema applied and a table of business writes, on the store's
// own clock or on the suite's.
var target = storetest.Target{
	Open:     openTarget,
	TxClaims: storetest.TxClaimCommitted,
	Session:  sessionStates,
}

func openTarget(t *testing.T, clock *storetest.Clock) storetest.Instance {
	t.Helper()
	var opts []sqlitestore.Option
	if clock != nil {
		opts = append(opts, sqlitestore.WithClock(clock.Now))
	}
	s := openStore(t, opts...)
	if _, err := s.DB().Exec(`CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return storetest.Instance{
		Store: s,
		Write: func(ctx context.Context, tx any, marker string) error {
			sqlTx, ok := tx.(*sqlitestore.Tx)
			if !ok {
				return fmt.Errorf("Driver() is %T, want *sqlitestore.Tx", tx)
			}
			_, err := sqlTx.ExecContext(ctx, `INSERT INTO effects (marker) VALUES (?)`, marker)
			return err
		},
		Exec: func(ctx context.Context, tx any, sql string) error {
			_, err := tx.(*sqlitestore.Tx).ExecContext(ctx, sql)
			return err
		},
		Count: func(ctx context.Context, marker string) (int, error) {
			var n int
			err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE marker = ?`, marker).Scan(&n)
			return n, err
		},
		Crash: func(_ context.Context, tx idemstore.Tx) error { return sqlitestore.CrashTx(tx) },
		Dump:  func(t *testing.T) []byte { return dumpKeys(t, s) },
	}
}

// dumpKeys returns every column of every row of the key table.
func dumpKeys(t *testing.T, s *sqlitestore.Store) []byte {
	rows, err := s.DB().QueryContext(context.Background(), `SELECT * FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				out.Write(b)
			} else {
				fmt.Fprint(&out, v)
			}
			fmt.Fprintf(&out, "|%s\n", cols[i])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
