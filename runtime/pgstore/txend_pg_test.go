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
// mark is gone) or was begun again (PostgreSQL's warning).
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
		`SAVEPOINT s; ROLLBACK TO SAVEPOINT s`, `savepoint s; rollback /* ; */ work to s`,
		`SELECT e'\\'`,
	}
	ending := []string{
		`COMMIT`, `commit and chain`, `END`, `end transaction`, `ABORT`, `ROLLBACK`, `Rollback And Chain`,
		`BEGIN`, `start transaction`, `/* x */ COMMIT`,
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
