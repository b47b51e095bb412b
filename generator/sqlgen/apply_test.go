package sqlgen

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"
)

// The tests below apply the real schema, in each layout, the way each tool
// reads its files, to real databases: a layout is right only if the tool
// can run it.

// gooseStatements splits one goose section the way goose does: full-line
// "--" comments are dropped, and outside StatementBegin/End a statement
// ends at a line whose last word before any "--" ends with a semicolon.
func gooseStatements(t *testing.T, section string) []string {
	t.Helper()
	var stmts []string
	var buf strings.Builder
	fenced := false
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "--") {
			switch strings.TrimSpace(strings.TrimPrefix(line, "--")) {
			case "+goose StatementBegin":
				fenced = true
			case "+goose StatementEnd":
				fenced = false
				stmts = append(stmts, buf.String())
				buf.Reset()
			}
			continue
		}
		buf.WriteString(line + "\n")
		if !fenced && endsWithSemicolon(line) {
			stmts = append(stmts, buf.String())
			buf.Reset()
		}
	}
	if rest := strings.TrimSpace(buf.String()); rest != "" {
		t.Fatalf("goose would fail: unfinished statement %q", rest)
	}
	return stmts
}

func endsWithSemicolon(line string) bool {
	prev := ""
	for _, w := range strings.Fields(line) {
		if strings.HasPrefix(w, "--") {
			break
		}
		prev = w
	}
	return strings.HasSuffix(prev, ";")
}

// scripts returns what each tool would send to the database for the up
// migrations, in their order, and the down migrations, in the reverse
// order: one script or statement per element.
func scripts(t *testing.T, dialect, layout string) (up, down []string) {
	t.Helper()
	files, err := Emit(Options{Dir: "m", Dialects: []string{dialect}, Layout: layout, Migrations: Migrations()})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range Migrations() {
		if !m.has(dialect) {
			continue
		}
		u, d := script(t, files, layout, i+1, m.Name)
		up = append(up, u...)
		down = append(d, down...)
	}
	return up, down
}

// script returns the up and down statements of one migration.
func script(t *testing.T, files map[string][]byte, layout string, version int, name string) (up, down []string) {
	t.Helper()
	switch layout {
	case LayoutGolangMigrate:
		p := fmt.Sprintf("m/%06d_%s", version, name)
		return []string{string(files[p+".up.sql"])}, []string{string(files[p+".down.sql"])}
	case LayoutGoose:
		text := string(files[fmt.Sprintf("m/%05d_%s.sql", version, name)])
		_, rest, ok := strings.Cut(text, "-- +goose Up\n")
		u, d, ok2 := strings.Cut(rest, "-- +goose Down\n")
		if !ok || !ok2 {
			t.Fatalf("goose annotations missing:\n%s", text)
		}
		return gooseStatements(t, u), gooseStatements(t, d)
	case LayoutDbmate:
		text := string(files[fmt.Sprintf("m/%014d_%s.sql", version, name)])
		_, rest, ok := strings.Cut(text, "-- migrate:up\n")
		u, d, ok2 := strings.Cut(rest, "-- migrate:down\n")
		if !ok || !ok2 {
			t.Fatalf("dbmate sections missing:\n%s", text)
		}
		return []string{u}, []string{d}
	}
	t.Fatalf("unknown layout %s", layout)
	return nil, nil
}

func TestApplySQLite(t *testing.T) {
	for _, layout := range Layouts {
		t.Run(layout, func(t *testing.T) {
			db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "idem.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			up, down := scripts(t, "sqlite", layout)
			run := func(stmts []string) {
				for _, s := range stmts {
					if _, err := db.Exec(s); err != nil {
						t.Fatalf("%v\nin:\n%s", err, s)
					}
				}
			}
			run(up)
			if _, err := db.Exec(`INSERT INTO idempotency_keys (tenant, scope, key, operation, fingerprint, state, expires_at, created_at)
				VALUES ('t', 'op', 'k', 'op', x'00', 'in_flight', 1, 1)`); err != nil {
				t.Fatalf("the migrated table does not take a row: %v", err)
			}
			for _, table := range []string{"idempotency_phases", "idempotency_outbox"} {
				if _, err := db.Exec(`SELECT count(*) FROM ` + table); err != nil {
					t.Errorf("up did not create %s: %v", table, err)
				}
			}
			run(down)
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'idempotency%'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("down left %d objects behind", n)
			}
			run(up) // down really undid up: up applies again
		})
	}
}

func TestApplyPostgres(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_DATABASE_URL")
	if url == "" {
		t.Skip("IDEMGEN_TEST_DATABASE_URL is unset; set it to a PostgreSQL URL to apply the generated migrations")
	}
	ctx := context.Background()
	for _, layout := range Layouts {
		t.Run(layout, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var rnd [6]byte
			_, _ = rand.Read(rnd[:])
			schema := "idemgen_sqlgen_" + hex.EncodeToString(rnd[:])
			if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE SCHEMA %s; SET search_path TO %s", schema, schema)); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
					t.Errorf("drop schema: %v", err)
				}
			}()
			up, down := scripts(t, "postgres", layout)
			run := func(stmts []string) {
				for _, s := range stmts {
					// No arguments: the simple protocol, which runs a
					// multi-statement script as the tools do.
					if _, err := conn.Exec(ctx, s); err != nil {
						t.Fatalf("%v\nin:\n%s", err, s)
					}
				}
			}
			run(up)
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace
				WHERE s.nspname = $1 AND p.proname LIKE 'idempotency%'`, schema).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Error("up created no functions")
			}
			// The last migration's functions stand: they read and write
			// the key table itself only.
			var only int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace
				WHERE s.nspname = $1 AND p.proname IN ('idempotency_claim', 'idempotency_complete', 'idempotency_sweep')
				  AND p.prosrc LIKE '%ONLY idempotency_keys%'`, schema).Scan(&only); err != nil {
				t.Fatal(err)
			}
			if only != 3 {
				t.Errorf("%d of the key table's 3 functions read it with ONLY after up", only)
			}
			for _, table := range []string{"idempotency_phases", "idempotency_outbox"} {
				if _, err := conn.Exec(ctx, `SELECT count(*) FROM `+table); err != nil {
					t.Errorf("up did not create %s: %v", table, err)
				}
			}
			run(down)
			var tables int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tables != 0 {
				t.Errorf("down left %d tables", tables)
			}
			run(up)
		})
	}
}
