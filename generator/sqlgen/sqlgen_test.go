package sqlgen

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/templates"
)

const pgUp = `-- The table.
CREATE TABLE idem_keys (
    tenant text NOT NULL, -- who; not a ; terminator
    note text DEFAULT 'a;b''c'
);

CREATE INDEX idem_keys_expires ON idem_keys (expires_at);

CREATE OR REPLACE FUNCTION idem_touch() RETURNS trigger AS $$
BEGIN
    NEW.updated = now();
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
`

const pgDown = "DROP FUNCTION idem_touch();\nDROP TABLE idem_keys;\n"

const liteUp = `CREATE TABLE idem_keys (k text PRIMARY KEY, n integer);
CREATE TRIGGER idem_keys_n AFTER UPDATE ON idem_keys
BEGIN
    UPDATE idem_keys SET n = CASE WHEN n IS NULL THEN 1 ELSE n + 1 END WHERE k = NEW.k;
    SELECT 1;
END;
/* trailing; comment */
`

// fake is one migration of fakeSchema, as the key table's.
var fake = []Migration{{Name: NameKeys, Schema: fakeSchema}}

func fakeSchema(d string) (string, string, error) {
	switch d {
	case "postgres":
		return pgUp, pgDown, nil
	case "sqlite":
		return liteUp, "DROP TABLE idem_keys;", nil
	}
	return "", "", errors.New("no such dialect")
}

func TestSplit(t *testing.T) {
	stmts, err := Split(pgUp)
	if err != nil {
		t.Fatal(err)
	}
	var compound []bool
	for _, s := range stmts {
		compound = append(compound, s.Compound)
		if !strings.HasSuffix(s.Text, ";") {
			t.Errorf("statement does not end with a semicolon: %q", s.Text)
		}
	}
	if diff := cmp.Diff([]bool{false, false, true}, compound); diff != "" {
		t.Fatalf("compound flags (-want +got):\n%s\nstatements: %+v", diff, stmts)
	}
	if !strings.HasPrefix(stmts[0].Text, "-- The table.") {
		t.Errorf("leading comment not kept with its statement: %q", stmts[0].Text)
	}

	stmts, err = Split(liteUp)
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 2 || stmts[0].Compound || !stmts[1].Compound {
		t.Fatalf("sqlite trigger split wrongly: %+v", stmts)
	}
	if !strings.HasSuffix(stmts[1].Text, "/* trailing; comment */") {
		t.Errorf("trailing comment lost: %q", stmts[1].Text)
	}

	for _, bad := range []string{"SELECT 'x;", "SELECT $a$ x;", "/* x"} {
		if _, err := Split(bad); err == nil {
			t.Errorf("Split(%q) accepted an unterminated token", bad)
		}
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestEmitLayouts(t *testing.T) {
	tests := []struct {
		layout   string
		dialects []string
		want     []string
	}{
		{"", []string{"postgres"}, []string{"m/000001_idempotency_keys.down.sql", "m/000001_idempotency_keys.up.sql"}},
		{"goose", []string{"sqlite"}, []string{"m/00001_idempotency_keys.sql"}},
		{"dbmate", []string{"postgres"}, []string{"m/00000000000001_idempotency_keys.sql"}},
		{"golang-migrate", []string{"postgres", "sqlite"}, []string{
			"m/postgres/000001_idempotency_keys.down.sql", "m/postgres/000001_idempotency_keys.up.sql",
			"m/sqlite/000001_idempotency_keys.down.sql", "m/sqlite/000001_idempotency_keys.up.sql",
		}},
	}
	for _, tt := range tests {
		files, err := Emit(Options{Dir: "m", Dialects: tt.dialects, Layout: tt.layout, Migrations: fake})
		if err != nil {
			t.Fatalf("%s: %v", tt.layout, err)
		}
		if diff := cmp.Diff(tt.want, keys(files)); diff != "" {
			t.Errorf("%s %v: files (-want +got):\n%s", tt.layout, tt.dialects, diff)
		}
		for p, b := range files {
			if !strings.HasPrefix(string(b), Header+"\n") {
				t.Errorf("%s lacks the header", p)
			}
		}
	}
}

func TestEmitGoose(t *testing.T) {
	files, err := Emit(Options{Dir: "m", Dialects: []string{"postgres"}, Layout: "goose", Migrations: fake})
	if err != nil {
		t.Fatal(err)
	}
	got := string(files["m/00001_idempotency_keys.sql"])
	up, down, ok := strings.Cut(got, "-- +goose Down\n")
	if !ok || !strings.Contains(up, "-- +goose Up\n") {
		t.Fatalf("goose sections missing:\n%s", got)
	}
	// Exactly the function is fenced, and the fence closes after its $$.
	if n := strings.Count(up, "-- +goose StatementBegin"); n != 1 {
		t.Errorf("%d StatementBegin in up, want 1:\n%s", n, up)
	}
	fn := up[strings.Index(up, "-- +goose StatementBegin"):]
	if !strings.Contains(fn, "$$ LANGUAGE plpgsql;\n-- +goose StatementEnd") {
		t.Errorf("function not fenced as a whole:\n%s", fn)
	}
	if strings.Contains(down, "StatementBegin") {
		t.Errorf("plain down statements fenced:\n%s", down)
	}

	files, err = Emit(Options{Dir: "m", Dialects: []string{"sqlite"}, Layout: "goose", Migrations: fake})
	if err != nil {
		t.Fatal(err)
	}
	got = string(files["m/00001_idempotency_keys.sql"])
	if !strings.Contains(got, "-- +goose StatementBegin\nCREATE TRIGGER") {
		t.Errorf("sqlite trigger not fenced:\n%s", got)
	}
}

func TestEmitDbmate(t *testing.T) {
	files, err := Emit(Options{Dir: "db/migrations", Dialects: []string{"postgres"}, Layout: "dbmate", Migrations: fake})
	if err != nil {
		t.Fatal(err)
	}
	got := string(files["db/migrations/00000000000001_idempotency_keys.sql"])
	iu, id := strings.Index(got, "\n-- migrate:up\n"), strings.Index(got, "\n-- migrate:down\n")
	if iu < 0 || id < iu {
		t.Fatalf("dbmate sections missing or out of order:\n%s", got)
	}
	if !strings.Contains(got[iu:id], "CREATE TABLE idem_keys") || !strings.Contains(got[id:], "DROP TABLE idem_keys;") {
		t.Errorf("sections hold the wrong SQL:\n%s", got)
	}
}

func TestEmitErrors(t *testing.T) {
	for _, o := range []Options{
		{Dialects: []string{"mysql"}},
		{Dialects: []string{"postgres", "postgres"}},
		{Dialects: nil},
		{Dialects: []string{"postgres"}, Layout: "flyway"},
	} {
		o.Migrations = fake
		if _, err := Emit(o); err == nil {
			t.Errorf("Emit(%+v) accepted bad options", o)
		}
	}
	broken := func(string) (string, string, error) { return "", "", errors.New("boom") }
	if _, err := Emit(Options{Dialects: []string{"postgres"}, Migrations: []Migration{{Name: NameKeys, Schema: broken}}}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("schema error not passed on: %v", err)
	}
	if !slices.Contains(Layouts, LayoutDbmate) {
		t.Error("dbmate missing from Layouts")
	}
}

// TestEmitVersions holds idemgen's migrations in their order, each at the
// version after the one before, from the first version the user chose.
func TestEmitVersions(t *testing.T) {
	tests := []struct {
		layout, version string
		want            []string
	}{
		{"", "", []string{
			"m/000001_idempotency_keys.down.sql", "m/000001_idempotency_keys.up.sql",
			"m/000002_idempotency_phases.down.sql", "m/000002_idempotency_phases.up.sql",
			"m/000003_idempotency_outbox.down.sql", "m/000003_idempotency_outbox.up.sql",
		}},
		{"goose", "9", []string{"m/00009_idempotency_keys.sql", "m/00010_idempotency_phases.sql", "m/00011_idempotency_outbox.sql"}},
		{"dbmate", "20260301120000", []string{
			"m/20260301120000_idempotency_keys.sql", "m/20260301120001_idempotency_phases.sql", "m/20260301120002_idempotency_outbox.sql",
		}},
		{"dbmate", "20260301125959", []string{
			"m/20260301125959_idempotency_keys.sql", "m/20260301125960_idempotency_phases.sql", "m/20260301125961_idempotency_outbox.sql",
		}},
	}
	for _, tt := range tests {
		files, err := Emit(Options{Dir: "m", Dialects: []string{"sqlite"}, Layout: tt.layout, Version: tt.version, Migrations: Migrations()})
		if err != nil {
			t.Fatalf("%s %s: %v", tt.layout, tt.version, err)
		}
		if diff := cmp.Diff(tt.want, keys(files)); diff != "" {
			t.Errorf("%s %s: files (-want +got):\n%s", tt.layout, tt.version, diff)
		}
		for _, p := range tt.want {
			if !IsMigrationName(path.Base(p)) {
				t.Errorf("IsMigrationName(%s) = false", p)
			}
		}
	}
	for v, want := range map[string]string{"1": "2", "000009": "000010", "999": "1000", "20261231235959": "20261231235960"} {
		if got := nextVersion(v); got != want {
			t.Errorf("nextVersion(%s) = %s, want %s", v, got, want)
		}
	}
	for name, want := range map[string]int{"000001_idempotency_keys.up.sql": 0, "7_idempotency_phases.sql": 1, "3_idempotency_outbox.down.sql": 2, "3_users.sql": -1} {
		if got := Index(name); got != want {
			t.Errorf("Index(%s) = %d, want %d", name, got, want)
		}
	}
}

// TestEmitRuntimeSchema holds each migration to the text the runtime's
// Migrate functions apply: the templates' files, read, not copied.
func TestEmitRuntimeSchema(t *testing.T) {
	for _, d := range Dialects {
		files, err := Emit(Options{Dir: "m", Dialects: []string{d}, Migrations: Migrations()})
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range []SchemaFunc{templates.Schema, templates.PhaseSchema, templates.OutboxSchema} {
			up, down, err := f(d)
			if err != nil {
				t.Fatal(err)
			}
			name := Migrations()[i].Name
			for dir, sql := range map[string]string{"up": up, "down": down} {
				p := fmt.Sprintf("m/%06d_%s.%s.sql", i+1, name, dir)
				if got := string(files[p]); !strings.HasSuffix(got, "\n\n"+body(sql)) {
					t.Errorf("%s %s does not end with the runtime's %s script:\n%s", d, p, dir, got)
				}
			}
		}
	}
}
