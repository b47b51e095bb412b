package pgstore_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// What the check of a handler's statements takes for a statement that
// ends or begins a transaction is what PostgreSQL does, on texts made of
// statements that end it, and of statements that hide ; and the same
// words in strings, quoted identifiers, dollar quotes and comments: each
// text runs in a transaction of a connection of its own, which tells
// whether the transaction ended (the connection is out of it, or its
// mark is gone), was begun again (PostgreSQL's warning) or has a
// savepoint left open.
func TestEndsTxAgreesWithPostgreSQL(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var begun atomic.Bool
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "already a transaction in progress") {
			begun.Store(true)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	pc := conn.PgConn()
	hiding := []string{
		`SELECT 1`, `SELECT ';'`, `SELECT 'it''s; commit'`, `SELECT E'\'; commit; select \''`,
		`SELECT $$;commit$$`, `SELECT $t$ end; $t$`, `SELECT 1 AS "c;commit"`, `SELECT 1 AS "a"";end"`,
		`SELECT 1 /* ; commit */`, `SELECT 1 /* /* ; */ end; */`, "SELECT 1 -- ; commit\n",
		`SELECT 1$$; commit $$`, `select 'end'`, `DO $$BEGIN PERFORM 1; END$$`,
		`SELECT e'\\'`,
	}
	ending := []string{
		`COMMIT`, `commit and chain`, `END`, `end transaction`, `ABORT`, `ROLLBACK`, `Rollback And Chain`,
		`BEGIN`, `start transaction`, `/* x */ COMMIT`,
		// Each leaves a savepoint s open.
		`SAVEPOINT s`, `SAVEPOINT s; ROLLBACK TO SAVEPOINT s`, `savepoint s; rollback /* ; */ work to s`,
		`savepoint s; savepoint t; release t`,
	}
	seps := []string{";", "; ", ";\n-- ;\n", "; /* ; */ ", ";;"}
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	var ended, skipped int
	for range 400 {
		var parts []string
		for range 1 + r.IntN(3) {
			if r.IntN(4) == 0 {
				parts = append(parts, ending[r.IntN(len(ending))])
			} else {
				parts = append(parts, hiding[r.IntN(len(hiding))])
			}
		}
		var b strings.Builder
		for i, p := range parts {
			if i > 0 {
				b.WriteString(seps[r.IntN(len(seps))])
			}
			b.WriteString(p)
		}
		text := b.String()
		if err := pc.Exec(ctx, `BEGIN; SELECT set_config('idemgen_test.mark', 'm', true)`).Close(); err != nil {
			t.Fatal(err)
		}
		begun.Store(false)
		_, runErr := pc.Exec(ctx, text).ReadAll()
		var got bool
		switch pc.TxStatus() {
		case 'I':
			got = true
		case 'E':
			// Failed in the transaction, or in one it began: unknown.
			skipped++
			if err := pc.Exec(ctx, `ROLLBACK`).Close(); err != nil {
				t.Fatal(err)
			}
			continue
		default:
			var mark *string
			if err := conn.QueryRow(ctx, `SELECT current_setting('idemgen_test.mark', true)`).Scan(&mark); err != nil {
				t.Fatal(err)
			}
			got = mark == nil || *mark != "m" || begun.Load()
			if !got {
				// A savepoint the text left open.
				got = pc.Exec(ctx, `RELEASE SAVEPOINT s`).Close() == nil
			}
			if err := pc.Exec(ctx, `ROLLBACK`).Close(); err != nil {
				t.Fatal(err)
			}
		}
		if got {
			ended++
		}
		if lexed := pgstore.LexedEndsTx(text); lexed != got {
			t.Errorf("LexedEndsTx(%q) = %v; PostgreSQL ended or began a transaction: %v (%v)", text, lexed, got, runErr)
		}
		if got && !pgstore.EndsTx(text) {
			t.Errorf("EndsTx(%q) = false; PostgreSQL ended or began a transaction (%v)", text, runErr)
		}
	}
	t.Logf("400 texts: %d ended or began a transaction, %d failed inside one", ended, skipped)
	if ended == 0 || ended == 400-skipped {
		t.Errorf("the texts were all alike: %d of %d ended a transaction", ended, 400-skipped)
	}
}

// A savepoint is opened by a statement of the handler's own text and by
// nothing else: PL/pgSQL has no SAVEPOINT and refuses it through
// EXECUTE, in a DO block or a procedure CALLed, and an SQL function or
// procedure may not hold one.
func TestNoSavepointButFromAText(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schema := "idemtest_" + randomHex(6)
	for _, q := range []string{
		`DO $$BEGIN EXECUTE 'SAVEPOINT x'; END$$`,
		`DO $$BEGIN EXECUTE 'RELEASE SAVEPOINT x'; END$$`,
		`DO $$BEGIN SAVEPOINT x; END$$`,
		`CREATE PROCEDURE ` + schema + `.p() LANGUAGE plpgsql AS $$BEGIN EXECUTE 'SAVEPOINT x'; END$$; CALL ` + schema + `.p()`,
		`CREATE FUNCTION ` + schema + `.f() RETURNS void LANGUAGE sql AS 'SAVEPOINT x'; SELECT ` + schema + `.f()`,
		`SET LOCAL check_function_bodies = off; CREATE FUNCTION ` + schema + `.f() RETURNS void LANGUAGE sql AS 'SAVEPOINT x'; SELECT ` + schema + `.f()`,
		`SET LOCAL check_function_bodies = off; CREATE PROCEDURE ` + schema + `.p() LANGUAGE sql AS 'SAVEPOINT x'; CALL ` + schema + `.p()`,
	} {
		if _, err := conn.Exec(ctx, `BEGIN; CREATE SCHEMA `+schema); err != nil {
			t.Fatal(err)
		}
		_, err := conn.PgConn().Exec(ctx, q).ReadAll()
		if err == nil {
			t.Errorf("%s ran", q)
		} else {
			t.Logf("%.50s...: %v", q, err)
		}
		if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
	}
}
