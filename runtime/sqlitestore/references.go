package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// foreignKeys lists the foreign keys of every table, main's and the
// temporary ones (a handler may attach no other database), by the table
// they reference.
const foreignKeys = `
SELECT s.name, f."table" FROM main.sqlite_schema AS s, pragma_foreign_key_list(s.name, 'main') AS f
 WHERE s.type = 'table'
UNION ALL
SELECT s.name, f."table" FROM temp.sqlite_schema AS s, pragma_foreign_key_list(s.name, 'temp') AS f
 WHERE s.type = 'table'`

// referencesStore fails when a table of t's has a foreign key that
// references one of the store's tables. The store deletes rows of its
// tables outside any handler's transaction, on connections without the
// authorizer (the sweeper, a release, an operator's forget): a foreign key
// ON DELETE CASCADE, or SET NULL, would run there what the handler made
// (a trigger on its own table, writing another tenant's key), and one
// without an action would refuse the store's deletes, every sweep's. The
// authorizer sees a CREATE TABLE but not the foreign keys it makes (and
// refuses ALTER TABLE, the other way to make one), so the tables are
// looked at once the handler made any, before the transaction commits.
func (t *storeTx) referencesStore(ctx context.Context) error {
	rows, err := t.tx.QueryContext(ctx, foreignKeys)
	if err != nil {
		return fmt.Errorf("sqlitestore: list foreign keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, parent string
		if err := rows.Scan(&table, &parent); err != nil {
			return fmt.Errorf("sqlitestore: list foreign keys: %w", err)
		}
		if storeTables[strings.ToLower(parent)] {
			return fmt.Errorf("sqlitestore: the handler made a table, %s, with a foreign key to the store's table %s; its transaction is not committed", table, parent)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlitestore: list foreign keys: %w", err)
	}
	return nil
}

// refused ends a transaction that may not commit for what its handler
// made: it is rolled back, and a held one's claim fails closed
// (indeterminate), for an operator to look at what reached for the
// store's tables.
func (t *storeTx) refused(ctx context.Context, err error) error {
	_ = t.tx.Rollback()
	// The write turn goes on first: the claim's end queues for it.
	t.close()
	if t.held {
		err = errors.Join(err, t.s.Abandon(ctx, t.id, t.token, idemstore.FailClosed))
	}
	return t.ended("commit", err)
}
