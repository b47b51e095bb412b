package sqlitestore

import "testing"

// triggerEvent reads a trigger's event past whatever SQLite lets stand
// before it: a temporary trigger, IF NOT EXISTS, a schema, a quoted name
// that spells an event, and comments.
func TestTriggerEventIsReadPastNamesAndComments(t *testing.T) {
	for q, want := range map[string]string{
		`CREATE TRIGGER t INSTEAD OF INSERT ON v BEGIN SELECT 1; END`:                                            "insert",
		`create temp trigger if not exists main.t instead of update of x on v begin select 1; end`:               "update",
		`CREATE TRIGGER "instead of insert" DELETE ON v BEGIN SELECT 1; END`:                                     "delete",
		"CREATE TRIGGER [a b] /* INSTEAD OF DELETE */ INSTEAD\n-- OF DELETE\nOF UPDATE ON v BEGIN SELECT 1; END": "update",
		`CREATE TRIGGER 'x''y' AFTER INSERT ON t BEGIN SELECT 1; END`:                                            "insert",
		"CREATE TRIGGER `if` BEFORE DELETE ON t BEGIN SELECT 1; END":                                             "delete",
		`CREATE TRIGGER t INSTEAD insert ON v BEGIN SELECT 1; END`:                                               "",
		`CREATE VIEW v AS SELECT 1`:    "",
		`CREATE TRIGGER "unterminated`: "",
	} {
		if got := triggerEvent(q); got != want {
			t.Errorf("triggerEvent(%q) = %q, want %q", q, got, want)
		}
	}
}
