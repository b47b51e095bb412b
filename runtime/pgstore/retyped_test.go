package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// retypedQuery is the application's own query that tenant A's handler has
// pgx prepare under a session of its making.
const retypedQuery = "SELECT count(*) FROM effects WHERE marker = $1"

// retyping is a way for a handler to have the application's query text
// parsed otherwise than in a clean session: its $1 comes out as name, which
// truncates a value to 63 bytes.
type retyping struct {
	name string
	// before and after run in the handler around its run of retypedQuery;
	// evil is a schema that holds a table effects whose marker is a name.
	before, after func(evil string) []string
}

func retypings() []retyping {
	return []retyping{
		{"temporary view",
			func(string) []string {
				return []string{"CREATE TEMP VIEW effects AS SELECT marker::name AS marker FROM effects"}
			},
			func(string) []string { return []string{"DROP VIEW pg_temp.effects"} }},
		{"search_path",
			func(evil string) []string {
				return []string{"SELECT set_config('search_path', '" + evil + ", ' || current_setting('search_path'), true)"}
			},
			func(string) []string { return nil }},
	}
}

// docs/semantics.md §7.2: nothing a handler leaves on its session reaches
// a later request on that connection, not even through pgx's statement
// cache, which fixes a text's parameter types where it first prepares (or
// describes) the text. Tenant A's handler runs the application's own
// query under a session where its $1 is a name, and ends in any of the
// ways a transaction ends (a keyless one after a failed statement too);
// tenant B's run of the same
// text after it on the one connection, through the pool and inside B's
// own handler, must match only B's own marker, not the 63 bytes it shares
// with another row's.
func TestHandlerCannotRetypeACachedQuery(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		for _, r := range retypings() {
			for _, e := range txEndings() {
				for _, fails := range []bool{false, true} {
					if fails && strings.HasPrefix(e.name, "keyed") {
						// A keyed transaction in which a statement failed
						// closes its session.
						continue
					}
					name := mode.String() + ", " + r.name + ", " + e.name
					if fails {
						name += ", after a failed statement"
					}
					t.Run(name, func(t *testing.T) { retype(t, mode, r, e, fails) })
				}
			}
		}
	}
}

// So too whichever call of its pgx.Tx the handler runs the query with,
// and with a mode it chooses itself: tenant B's runs use that mode too.
func TestHandlerCannotRetypeThroughAnyCall(t *testing.T) {
	vias := map[string]func(ctx context.Context, ptx pgx.Tx, opts []any) error{
		"Query": func(ctx context.Context, ptx pgx.Tx, opts []any) error {
			rows, err := ptx.Query(ctx, retypedQuery, append(opts, "x")...)
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			return err
		},
		"Exec": func(ctx context.Context, ptx pgx.Tx, opts []any) error {
			_, err := ptx.Exec(ctx, retypedQuery, append(opts, "x")...)
			return err
		},
		"named arguments": func(ctx context.Context, ptx pgx.Tx, opts []any) error {
			named := strings.Replace(retypedQuery, "$1", "@marker", 1)
			var n int
			return ptx.QueryRow(ctx, named, append(opts, pgx.NamedArgs{"marker": "x"})...).Scan(&n)
		},
		"a batch": func(ctx context.Context, ptx pgx.Tx, _ []any) error {
			b := &pgx.Batch{}
			b.Queue(retypedQuery, "x")
			return ptx.SendBatch(ctx, b).Close()
		},
		// pgx's batch calls the last of a query's rewriters.
		"a batch of named arguments after others": func(ctx context.Context, ptx pgx.Tx, _ []any) error {
			b := &pgx.Batch{}
			b.Queue(strings.Replace(retypedQuery, "$1", "@marker", 1), pgx.NamedArgs{}, pgx.NamedArgs{"marker": "x"})
			return ptx.SendBatch(ctx, b).Close()
		},
	}
	modes := []struct {
		name string
		pool pgx.QueryExecMode
		opts []any
	}{
		{"cache_statement", pgx.QueryExecModeCacheStatement, nil},
		{"cache_describe", pgx.QueryExecModeCacheDescribe, nil},
		{"cache_describe chosen by the query", pgx.QueryExecModeCacheStatement, []any{pgx.QueryExecModeCacheDescribe}},
	}
	e := txEndings()[0]
	for _, m := range modes {
		for via, run := range vias {
			if strings.HasPrefix(via, "a batch") && m.opts != nil {
				continue // a batch runs in the pool's mode
			}
			t.Run(m.name+", "+via, func(t *testing.T) {
				retypeWith(t, m.pool, m.opts, retypings()[0], e, false, func(ctx context.Context, ptx pgx.Tx) error {
					return run(ctx, ptx, slices.Clone(m.opts))
				})
			})
		}
	}
}

func retype(t *testing.T, mode pgx.QueryExecMode, r retyping, e txEnding, fails bool) {
	retypeWith(t, mode, nil, r, e, fails, func(ctx context.Context, ptx pgx.Tx) error {
		var n int
		return ptx.QueryRow(ctx, retypedQuery, "x").Scan(&n)
	})
}

// retypeWith has tenant A's handler run retypedQuery with run under r, on
// a pool in mode, and tenant B run it with opts, pgx's options.
func retypeWith(t *testing.T, mode pgx.QueryExecMode, opts []any, r retyping, e txEnding, fails bool, run func(context.Context, pgx.Tx) error) {
	s, pool := newStore(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = mode
	})
	ctx := context.Background()
	evil := "idemevil_" + randomHex(6)
	shared := strings.Repeat("y", 63)
	secret := shared + "-tenant-b-secret"
	for _, stmt := range []string{
		"CREATE SCHEMA " + evil,
		"CREATE TABLE " + evil + ".effects (marker name NOT NULL)",
		"INSERT INTO effects (marker) VALUES ('" + shared + "')",
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+evil+" CASCADE") })
	// A first transaction prepares the statements of its ending.
	if err := e.end(ctx, e.begin(t, s, "k-0")); err != nil {
		t.Fatal(err)
	}
	a := e.begin(t, s, "k-a")
	for _, stmt := range r.before(evil) {
		handlerExec(t, a, stmt)
	}
	if err := run(ctx, a.Driver().(pgx.Tx)); err != nil {
		t.Fatalf("A's run of the query: %v", err)
	}
	for _, stmt := range r.after(evil) {
		handlerExec(t, a, stmt)
	}
	if fails {
		_, _ = a.Driver().(pgx.Tx).Exec(ctx, "SELECT 1/0")
	}
	_ = e.end(ctx, a)
	var n int
	if err := pool.QueryRow(ctx, retypedQuery, append(slices.Clone(opts), secret)...).Scan(&n); err != nil || n != 0 {
		t.Errorf("B's query through the pool after A's request = %d, %v; want 0", n, err)
	}
	b := e.begin(t, s, "k-b")
	err := b.Driver().(pgx.Tx).QueryRow(ctx, retypedQuery, append(slices.Clone(opts), secret)...).Scan(&n)
	if err != nil || n != 0 {
		t.Errorf("B's query in its handler after A's request = %d, %v; want 0", n, err)
	}
	if err := e.end(ctx, b); err != nil {
		t.Fatalf("ending B's transaction: %v", err)
	}
}

// What pgx prepared in a handler's session is prepared again once the
// session is clean, and stays cached: a handler whose statements pgx
// prepares (its default mode) pays no round trip for it once its texts
// are cached, where each request's handler would otherwise have them
// prepared anew. A pool that describes (cache_describe) leaves no trace of
// what it described on the session, so every text the handler ran is
// described again after each request, in one round trip for all.
func TestHandlerStatementsStayCached(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		t.Run(mode.String(), func(t *testing.T) {
			s, rt := countedStore(t, mode)
			ctx := context.Background()
			request := func(key string) (handler, end snapshot) {
				t.Helper()
				tx := wonTx(t, s, key, "tok-"+key)
				before := rt.snap()
				var n int
				ptx := tx.Driver().(pgx.Tx)
				if _, err := ptx.Exec(ctx, "INSERT INTO effects (marker) VALUES ($1)", key); err != nil {
					t.Fatal(err)
				}
				if err := ptx.QueryRow(ctx, retypedQuery, key).Scan(&n); err != nil || n != 1 {
					t.Fatalf("the handler's query = %d, %v; want 1", n, err)
				}
				handler = rt.snap().sub(before)
				before = rt.snap()
				if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
					t.Fatal(err)
				}
				quiet(t, s)
				return handler, rt.snap().sub(before)
			}
			handler, end := request("k-0")
			t.Logf("first request: handler %+v; end %+v", handler, end)
			request("k-1")
			handler, end = request("k-2")
			t.Logf("third request: handler %+v; end %+v", handler, end)
			wantEnd := int64(2)
			if mode == pgx.QueryExecModeCacheDescribe {
				wantEnd++
			}
			if handler.writes != 2 || end.writes != wantEnd {
				t.Errorf("socket writes of a request's handler %d, of its end %d; want 2, %d", handler.writes, end.writes, wantEnd)
			}
		})
	}
}

// A statement pgx prepared before the handler ran is parsed again where
// it next runs once something made it invalid, and keeps what that parse
// read of the session's settings: here the date of a constant that
// DateStyle reads. Tenant A's handler sets DateStyle and has the
// application's query, prepared in a clean session, parse again under it
// (DISCARD PLANS); tenant B's run of the same text after it, on the one
// connection, must read the constant as a clean session does.
func TestHandlerCannotReparseACachedQuery(t *testing.T) {
	const query = "SELECT count(*) FROM effects WHERE marker = $1 AND pg_catalog.to_char('03/04/2024'::date, 'MM') = '03'"
	for _, e := range txEndings() {
		for _, fails := range []bool{false, true} {
			if fails && strings.HasPrefix(e.name, "keyed") {
				continue
			}
			name := e.name
			if fails {
				name += ", after a failed statement"
			}
			t.Run(name, func(t *testing.T) {
				s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
				ctx := context.Background()
				if _, err := pool.Exec(ctx, "INSERT INTO effects (marker) VALUES ('b')"); err != nil {
					t.Fatal(err)
				}
				var n int
				if err := pool.QueryRow(ctx, query, "b").Scan(&n); err != nil || n != 1 {
					t.Fatalf("B's query before A's request = %d, %v; want 1", n, err)
				}
				if err := e.end(ctx, e.begin(t, s, "k-0")); err != nil {
					t.Fatal(err)
				}
				a := e.begin(t, s, "k-a")
				handlerExec(t, a, "SET LOCAL DateStyle = 'ISO, DMY'")
				handlerExec(t, a, "DISCARD PLANS")
				if err := a.Driver().(pgx.Tx).QueryRow(ctx, query, "b").Scan(&n); err != nil || n != 0 {
					t.Fatalf("A's run of the query = %d, %v; want 0, the constant read as 3 April", n, err)
				}
				if fails {
					_, _ = a.Driver().(pgx.Tx).Exec(ctx, "SELECT 1/0")
				}
				_ = e.end(ctx, a)
				if err := pool.QueryRow(ctx, query, "b").Scan(&n); err != nil || n != 1 {
					t.Errorf("B's query after A's request = %d, %v; want 1", n, err)
				}
			})
		}
	}
}

// pgx learns the column types of a COPY the same way, from a query it
// prepares or describes: tenant A's handler copies into a temporary table
// that stands for the application's, whose column is a float8 where the
// application's is an int8; tenant B's copy of 5 into the application's
// table after it, on the one connection, must store 5, not the bits of
// 5.0 read as an int8.
func TestHandlerCannotRetypeACopy(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		t.Run(mode.String(), func(t *testing.T) {
			s, pool := newStore(t, func(c *pgxpool.Config) {
				c.MaxConns = 1
				c.ConnConfig.DefaultQueryExecMode = mode
			})
			ctx := context.Background()
			if _, err := pool.Exec(ctx, "CREATE TABLE amounts (n int8 NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			if err := wonTx(t, s, "k-0", "tok-0").Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Fatal(err)
			}
			a := wonTx(t, s, "k-a", "tok-a")
			ptx := a.Driver().(pgx.Tx)
			handlerExec(t, a, "CREATE TEMP TABLE amounts (n float8 NOT NULL)")
			if _, err := ptx.CopyFrom(ctx, pgx.Identifier{"amounts"}, []string{"n"}, pgx.CopyFromRows([][]any{{1.5}})); err != nil {
				t.Fatalf("A's copy: %v", err)
			}
			handlerExec(t, a, "DROP TABLE pg_temp.amounts")
			if err := a.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.CopyFrom(ctx, pgx.Identifier{"amounts"}, []string{"n"}, pgx.CopyFromRows([][]any{{int64(5)}})); err != nil {
				t.Fatalf("B's copy: %v", err)
			}
			var got []int64
			rows, err := pool.Query(ctx, "SELECT n FROM amounts")
			if err == nil {
				got, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			}
			if err != nil || len(got) != 1 || got[0] != 5 {
				t.Fatalf("the application's table after B's copy = %v, %v; want [5]", got, err)
			}
		})
	}
}

// So too for a text outside ASCII, whatever client_encoding the handler
// leaves on its session, which outlives its transaction until the reset:
// the texts pgx prepared for the handler are told apart by their own
// bytes, not by those of the session's encoding.
func TestHandlerCannotRetypeThroughTheClientEncoding(t *testing.T) {
	// A letter outside ASCII, which LATIN1 writes as one byte.
	const query = "SELECT count(*) FROM effects WHERE marker = $1 AND marker <> 'é'"
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			shared := strings.Repeat("y", 63)
			secret := shared + "-tenant-b-secret"
			if _, err := pool.Exec(ctx, "INSERT INTO effects (marker) VALUES ('"+shared+"')"); err != nil {
				t.Fatal(err)
			}
			if err := e.end(ctx, e.begin(t, s, "k-0")); err != nil {
				t.Fatal(err)
			}
			a := e.begin(t, s, "k-a")
			handlerExec(t, a, "CREATE TEMP VIEW effects AS SELECT marker::name AS marker FROM effects")
			var n int
			if err := a.Driver().(pgx.Tx).QueryRow(ctx, query, "x").Scan(&n); err != nil {
				t.Fatalf("A's run of the query: %v", err)
			}
			handlerExec(t, a, "DROP VIEW pg_temp.effects")
			handlerExec(t, a, "SET client_encoding TO 'LATIN1'")
			_ = e.end(ctx, a)
			if err := pool.QueryRow(ctx, query, secret).Scan(&n); err != nil || n != 0 {
				t.Errorf("B's query through the pool after A's request = %d, %v; want 0", n, err)
			}
			b := e.begin(t, s, "k-b")
			if err := b.Driver().(pgx.Tx).QueryRow(ctx, query, secret).Scan(&n); err != nil || n != 0 {
				t.Errorf("B's query in its handler after A's request = %d, %v; want 0", n, err)
			}
			_ = e.end(ctx, b)
		})
	}
}

// A handler's statements on a temporary table of its own (ON COMMIT DROP)
// do not parse once the session is reset: they are forgotten and not
// prepared again. The first request's end finds them all in one batch
// that fails and one round trip that tries each (parseFailures), however
// many they are, where it tried one batch per statement; the connection
// keeps them as such, so that a later request's end sends no batch for
// them. (Forgetting them still has pgx deallocate each statement but the
// last in a round trip of its own.)
func TestHandlerTempTableStatementsAreNotPreparedAgain(t *testing.T) {
	for _, k := range []int{1, 5} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			s, rt := countedStore(t, pgx.QueryExecModeCacheStatement)
			ctx := context.Background()
			request := func(key string) (all, end snapshot) {
				t.Helper()
				start := rt.snap()
				tx := wonTx(t, s, key, "tok-"+key)
				ptx := tx.Driver().(pgx.Tx)
				if _, err := ptx.Exec(ctx, "CREATE TEMP TABLE scratch (v int) ON COMMIT DROP"); err != nil {
					t.Fatal(err)
				}
				for i := range k {
					if _, err := ptx.Exec(ctx, fmt.Sprintf("INSERT INTO scratch (v) VALUES ($1) -- %d", i), i); err != nil {
						t.Fatal(err)
					}
				}
				before := rt.snap()
				if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
					t.Fatal(err)
				}
				quiet(t, s)
				return rt.snap().sub(start), rt.snap().sub(before)
			}
			all, end := request("k-0")
			t.Logf("first request: all %+v; end %+v", all, end)
			if end.batches > 1 {
				t.Errorf("the first request's end sent %d batches; want 1", end.batches)
			}
			request("k-1")
			all, end = request("k-2")
			t.Logf("third request: all %+v; end %+v", all, end)
			if end.batches != 0 {
				t.Errorf("the third request's end sent %d batches; want none", end.batches)
			}
		})
	}
}
