package sqlitestore

import (
	"strings"
	"testing"
)

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

// updateOf reads a trigger's UPDATE OF list, its names unquoted, and
// tells a statement it cannot read.
func TestUpdateOfReadsTheNamesATriggerLists(t *testing.T) {
	for q, want := range map[string]string{
		`CREATE TRIGGER t AFTER UPDATE OF a ON x BEGIN SELECT 1; END`:                                 "a",
		`CREATE TRIGGER t UPDATE OF "a ""b""", [c d], 'e', ` + "`f`" + `, G ON x BEGIN SELECT 1; END`: `a "b"|c d|e|f|G`,
		"CREATE TRIGGER t AFTER UPDATE /* OF z */ OF\n-- ON\na ON x BEGIN SELECT 1; END":              "a",
		`CREATE TRIGGER t AFTER UPDATE ON x BEGIN SELECT 1; END`:                                      "",
		`CREATE TRIGGER "update of a on" AFTER INSERT ON x BEGIN SELECT 1; END`:                       "",
		`CREATE TRIGGER t AFTER UPDATE OF a, ON x BEGIN SELECT 1; END`:                                "!",
		`CREATE TRIGGER t AFTER UPDATE OF a b ON x BEGIN SELECT 1; END`:                               "!",
		`CREATE TRIGGER t AFTER UPDATE OF`:                                                            "!",
		`CREATE TRIGGER t AFTER UPDATE`:                                                               "!",
		`CREATE TRIGGER "unterminated`:                                                                "!",
	} {
		names, ok := updateOf(q)
		got := strings.Join(names, "|")
		if !ok {
			got = "!"
		}
		if got != want {
			t.Errorf("updateOf(%q) = %q, want %q", q, got, want)
		}
	}
}
