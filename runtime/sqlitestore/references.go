package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// foreignKeys lists the foreign keys of every table, main's and the
// temporary ones (a handler may attach no other database), by the table
// they reference.
//
// The pragmas' table-valued functions are named with the schema temp:
// SQLite looks a name up among the tables and views before its own
// functions, in main and temp when the name has no schema, in the one
// named when it has; a view of main's named as the function (made before
// handlers were refused such names, see reservedName) is passed over so,
// and the temporary schema holds none (the authorizer refuses a handler
// one, and they end with the connection).
const foreignKeys = `
SELECT s.name, f."table" FROM main.sqlite_schema AS s, temp.pragma_foreign_key_list(s.name, 'main') AS f
 WHERE s.type = 'table'
UNION ALL
SELECT s.name, f."table" FROM temp.sqlite_schema AS s, temp.pragma_foreign_key_list(s.name, 'temp') AS f
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
// madeTrigger), or a trigger whose writes a table or view the handler
// made or dropped changes, reaches the store's tables (referencesStore,
// triggersWriteStore). It runs once the handler's calls are done, and
// costs nothing to a transaction in which the handler made or dropped
// none.
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
// with the columns a statement may set, in order, and whether it has a
// rowid (a table, not WITHOUT ROWID). The functions are named as in
// foreignKeys.
const triggeredColumns = `
SELECT o.name, o.type = 'view', c.name,
       o.type = 'table' AND NOT EXISTS (SELECT 1 FROM temp.pragma_table_list AS l
                                         WHERE l.schema = 'main' AND l.name = o.name AND l.wr)
  FROM main.sqlite_schema AS o, temp.pragma_table_xinfo(o.name, 'main') AS c
 WHERE o.type IN ('table', 'view') AND c.hidden = 0
   AND lower(o.name) IN (SELECT lower(tbl_name) FROM main.sqlite_schema WHERE type = 'trigger')
 ORDER BY o.name, c.cid`

// rowidNames are the names by which a statement sets a table's rowid.
// SQLite fires an UPDATE OF trigger by the names a SET clause gives, not
// by the column they set, so the check's UPDATE gives each of them (but
// one that a real column takes, which it sets as that column).
var rowidNames = []string{"rowid", "oid", "_rowid_"}

// tableTriggers lists the statements of the triggers of a table or view
// of main's.
const tableTriggers = `
SELECT sql FROM main.sqlite_schema WHERE type = 'trigger' AND lower(tbl_name) = lower(?)`

// triggersWriteStore fails when a trigger of main's writes one of the
// store's tables, directly or through the triggers, views and foreign
// keys its statements set off. Such a trigger outlives the transaction,
// and fires in the application's own writes outside any request, where
// no authorizer checks it. The authorizer is not asked about a trigger's
// statements when it is made, but when a statement that fires it is
// prepared: so an INSERT, an UPDATE of every column (and of the rowid,
// by each of its names, and of each name an UPDATE OF trigger lists, see
// updateOfNames) and a DELETE of each table or view with triggers are
// prepared (not run), while the authorizer refuses the store's tables'
// writes (checking). One that cannot be prepared fails too, but
// a view's for which the view has no trigger (viewUntriggered): SQLite
// stops coding a trigger's steps at the first that fails, so a trigger
// that fails to prepare hides the steps after it, which run once the
// handler, or a later one, makes what the first lacks.
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
		var view, rowid bool
		if err := rows.Scan(&name, &view, &col, &rowid); err != nil {
			return fmt.Errorf("sqlitestore: list triggers: %w", err)
		}
		if len(targets) == 0 || targets[len(targets)-1].name != name {
			targets = append(targets, &target{name: name, view: view})
			if rowid {
				targets[len(targets)-1].cols = slices.Clone(rowidNames)
			}
		}
		tg := targets[len(targets)-1]
		tg.cols = slices.DeleteFunc(tg.cols, func(c string) bool { return sameName(c, col) })
		tg.cols = append(tg.cols, col)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlitestore: list triggers: %w", err)
	}
	rows.Close()
	for _, tg := range targets {
		names, err := t.updateOfNames(ctx, tg.name)
		if err != nil {
			return err
		}
		for _, n := range names {
			if !slices.ContainsFunc(tg.cols, func(c string) bool { return sameName(c, n) }) {
				tg.cols = append(tg.cols, n)
			}
		}
	}
	t.checking.Store(true)
	defer t.checking.Store(false)
	for _, tg := range targets {
		name := "main." + quoteName(tg.name)
		set := make([]string, len(tg.cols))
		for i, c := range tg.cols {
			set[i] = quoteName(c) + " = " + quoteName(c)
		}
		for _, st := range []struct{ event, q string }{
			{"insert", "INSERT INTO " + name + " DEFAULT VALUES"},
			{"update", "UPDATE " + name + " SET " + strings.Join(set, ", ")},
			{"delete", "DELETE FROM " + name},
		} {
			stmt, err := t.tx.PrepareContext(ctx, st.q)
			var se *sqlite.Error
			switch {
			case err == nil:
				_ = stmt.Close()
				continue
			case errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_AUTH:
				return fmt.Errorf("sqlitestore: a trigger of %s writes the store's tables; the handler's transaction is not committed", tg.name)
			case tg.view && strings.Contains(err.Error(), "because it is a view"):
				untriggered, lerr := t.viewUntriggered(ctx, tg.name, st.event)
				if lerr != nil {
					return lerr
				}
				if untriggered {
					continue
				}
			}
			return fmt.Errorf("sqlitestore: the triggers of %s cannot be checked; the handler's transaction is not committed: %w", tg.name, err)
		}
	}
	return nil
}

// updateOfNames returns the names the UPDATE OF triggers of table, of
// main's, list. SQLite fires such a trigger by the names a SET clause
// gives, and does not check, when the trigger is made, that they are
// columns: a trigger UPDATE OF a column the table does not have yet is
// coded into no UPDATE of today's columns, and would fire once the
// application adds the column. The check's UPDATE sets each of these
// names too, so that the trigger's steps are coded, and a name that is
// no column (nor the rowid's) fails its prepare, and the transaction. A
// trigger updateOf cannot read fails it as well.
func (t *storeTx) updateOfNames(ctx context.Context, table string) ([]string, error) {
	rows, err := t.tx.QueryContext(ctx, tableTriggers, table)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list the triggers of %s: %w", table, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return nil, fmt.Errorf("sqlitestore: list the triggers of %s: %w", table, err)
		}
		of, ok := updateOf(q)
		if !ok {
			return nil, fmt.Errorf("sqlitestore: a trigger of %s cannot be read; the handler's transaction is not committed", table)
		}
		names = append(names, of...)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list the triggers of %s: %w", table, err)
	}
	return names, nil
}

// viewUntriggered reports whether view, of main's, has no trigger for
// event (insert, update or delete): a statement of the view's then fails
// to prepare for the view's own sake, not for a trigger's step. A trigger
// whose event triggerEvent cannot read counts as one for every event.
func (t *storeTx) viewUntriggered(ctx context.Context, view, event string) (bool, error) {
	rows, err := t.tx.QueryContext(ctx, tableTriggers, view)
	if err != nil {
		return false, fmt.Errorf("sqlitestore: list the triggers of %s: %w", view, err)
	}
	defer rows.Close()
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return false, fmt.Errorf("sqlitestore: list the triggers of %s: %w", view, err)
		}
		if e := triggerEvent(q); e == "" || e == event {
			return false, nil
		}
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("sqlitestore: list the triggers of %s: %w", view, err)
	}
	return true, nil
}

// triggerEvent returns the event of a CREATE TRIGGER statement (insert,
// update or delete), as sqlite_schema keeps it; "" when q does not read
// as one:
//
//	CREATE [TEMP|TEMPORARY] TRIGGER [IF NOT EXISTS] [schema .] name
//	  [BEFORE | AFTER | INSTEAD OF] {DELETE | INSERT | UPDATE} …
func triggerEvent(q string) string {
	e, _ := triggerHead(sqlTokens(q, 12))
	return e
}

// updateOf returns the names of the OF list of a CREATE TRIGGER statement,
// unquoted, and whether q reads as one at all: none for a trigger of
// another event, or of UPDATE of every column.
//
//	… UPDATE [OF name [, name …]] ON …
func updateOf(q string) ([]string, bool) {
	toks := sqlTokens(q, len(q))
	e, i := triggerHead(toks)
	switch {
	case e == "":
		return nil, false
	case e != "update" || i+1 < len(toks) && strings.EqualFold(toks[i+1], "ON"):
		return nil, true
	case i+1 >= len(toks) || !strings.EqualFold(toks[i+1], "OF"):
		return nil, false
	}
	var names []string
	for i += 2; i+1 < len(toks); i += 2 {
		n, ok := unquoteName(toks[i])
		if !ok {
			return nil, false
		}
		names = append(names, n)
		switch {
		case strings.EqualFold(toks[i+1], "ON"):
			return names, true
		case toks[i+1] != ",":
			return nil, false
		}
	}
	return nil, false
}

// unquoteName returns the name a token of sqlTokens spells, and whether
// it is one: unquoted, quoted as SQLite lets a name be (double quotes,
// brackets, backquotes, single quotes), a quote doubled inside standing
// for itself.
func unquoteName(tok string) (string, bool) {
	if tok == "" {
		return "", false
	}
	switch c := tok[0]; {
	case c == '[':
		return tok[1 : len(tok)-1], true
	case c == '"' || c == '\'' || c == '`':
		q := string(c)
		return strings.ReplaceAll(tok[1:len(tok)-1], q+q, q), true
	case nameByte(c):
		return tok, true
	}
	return "", false
}

// triggerHead reads toks, the tokens of a CREATE TRIGGER statement, up to
// its event, returning the event as triggerEvent does and the index of
// its token.
func triggerHead(toks []string) (string, int) {
	i := 0
	word := func(ws ...string) bool {
		for _, w := range ws {
			if i < len(toks) && strings.EqualFold(toks[i], w) {
				i++
				return true
			}
		}
		return false
	}
	if !word("CREATE") {
		return "", 0
	}
	word("TEMP", "TEMPORARY")
	if !word("TRIGGER") {
		return "", 0
	}
	if i+2 < len(toks) && strings.EqualFold(toks[i], "IF") && strings.EqualFold(toks[i+1], "NOT") &&
		strings.EqualFold(toks[i+2], "EXISTS") {
		i += 3
	}
	i++ // the name, or its schema
	if i < len(toks) && toks[i] == "." {
		i += 2
	}
	if !word("BEFORE", "AFTER") && word("INSTEAD") && !word("OF") {
		return "", 0
	}
	if i < len(toks) {
		switch e := strings.ToLower(toks[i]); e {
		case "insert", "update", "delete":
			return e, i
		}
	}
	return "", 0
}

// sqlTokens splits off the first n tokens of q, as SQLite's tokenizer
// would, enough to read a statement's first words: the spaces and
// comments between them are left out, a quoted name is one token, quotes
// and all, and a character that is no part of a name a token of its own.
func sqlTokens(q string, n int) []string {
	var toks []string
	i := 0
	for i < len(q) && len(toks) < n {
		c := q[i]
		j := i + 1
		switch {
		case strings.IndexByte(" \t\n\f\r", c) >= 0:
			i = j
			continue
		case strings.HasPrefix(q[i:], "--"):
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				return toks
			}
			i += end + 1
			continue
		case strings.HasPrefix(q[i:], "/*"):
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return toks
			}
			i += end + 4
			continue
		case c == '[':
			end := strings.IndexByte(q[j:], ']')
			if end < 0 {
				return toks
			}
			j += end + 1
		case c == '"' || c == '\'' || c == '`':
			// A quote doubled inside stands for itself.
			for {
				end := strings.IndexByte(q[j:], c)
				if end < 0 {
					return toks
				}
				j += end + 1
				if j == len(q) || q[j] != c {
					break
				}
				j++
			}
		case nameByte(c):
			for j < len(q) && nameByte(q[j]) {
				j++
			}
		}
		toks = append(toks, q[i:j])
		i = j
	}
	return toks
}

// nameByte reports whether c may be part of an unquoted name, as SQLite
// reads one.
func nameByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// sameName reports whether a and b name the same column: SQLite folds
// ASCII case only.
func sameName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
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
