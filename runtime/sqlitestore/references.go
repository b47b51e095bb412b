package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

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

// checkMade fails when a table or a trigger the handler made (madeTable,
// madeTrigger) reaches the store's tables (referencesStore,
// triggersWriteStore). It runs once the handler's calls are done, and
// costs nothing to a transaction in which the handler made neither.
func (t *storeTx) checkMade(ctx context.Context) error {
	if t.madeTable.Load() {
		if err := t.referencesStore(ctx); err != nil {
			return err
		}
	}
	if t.madeTrigger.Load() {
		return t.triggersWriteStore(ctx)
	}
	return nil
}

// triggeredColumns lists main's tables and views that have triggers, each
// with the columns a statement may set, in order.
const triggeredColumns = `
SELECT o.name, o.type = 'view', c.name
  FROM main.sqlite_schema AS o, pragma_table_xinfo(o.name, 'main') AS c
 WHERE o.type IN ('table', 'view') AND c.hidden = 0
   AND lower(o.name) IN (SELECT lower(tbl_name) FROM main.sqlite_schema WHERE type = 'trigger')
 ORDER BY o.name, c.cid`

// triggersWriteStore fails when a trigger of main's writes one of the
// store's tables, directly or through the triggers, views and foreign
// keys its statements set off. Such a trigger outlives the transaction,
// and fires in the application's own writes outside any request, where
// no authorizer checks it. The authorizer is not asked about a trigger's
// statements when it is made, but when a statement that fires it is
// prepared: so an INSERT, an UPDATE of every column and a DELETE of each
// table or view with triggers are prepared (not run), while the
// authorizer refuses the store's tables' writes (checking). One that
// cannot be prepared fails too, but a view's without a trigger for it: a
// trigger that fails to prepare now may prepare once the handler made
// what it lacks, with no new trigger to check it.
func (t *storeTx) triggersWriteStore(ctx context.Context) error {
	type target struct {
		name string
		view bool
		cols []string
	}
	var targets []*target
	rows, err := t.tx.QueryContext(ctx, triggeredColumns)
	if err != nil {
		return fmt.Errorf("sqlitestore: list triggers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, col string
		var view bool
		if err := rows.Scan(&name, &view, &col); err != nil {
			return fmt.Errorf("sqlitestore: list triggers: %w", err)
		}
		if len(targets) == 0 || targets[len(targets)-1].name != name {
			targets = append(targets, &target{name: name, view: view})
		}
		tg := targets[len(targets)-1]
		tg.cols = append(tg.cols, quoteName(col)+" = "+quoteName(col))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlitestore: list triggers: %w", err)
	}
	t.checking.Store(true)
	defer t.checking.Store(false)
	for _, tg := range targets {
		name := "main." + quoteName(tg.name)
		for _, q := range []string{
			"INSERT INTO " + name + " DEFAULT VALUES",
			"UPDATE " + name + " SET " + strings.Join(tg.cols, ", "),
			"DELETE FROM " + name,
		} {
			stmt, err := t.tx.PrepareContext(ctx, q)
			var se *sqlite.Error
			switch {
			case err == nil:
				_ = stmt.Close()
			case errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_AUTH:
				return fmt.Errorf("sqlitestore: the handler made a trigger, and a trigger of %s writes the store's tables; its transaction is not committed", tg.name)
			case tg.view && strings.Contains(err.Error(), "because it is a view"):
			default:
				return fmt.Errorf("sqlitestore: the handler made a trigger, and the triggers of %s cannot be checked; its transaction is not committed: %w", tg.name, err)
			}
		}
	}
	return nil
}

// quoteName is name as an SQL identifier.
func quoteName(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
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
