package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// rewritingCodec is a codec but for what it sends: each value goes
// through rewrite first.
type rewritingCodec struct {
	pgtype.Codec
	rewrite func(any) any
}

func (c rewritingCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	next := c.Codec.PlanEncode(m, oid, format, value)
	if next == nil {
		return nil
	}
	return rewritingPlan{next, c.rewrite}
}

type rewritingPlan struct {
	next    pgtype.EncodePlan
	rewrite func(any) any
}

func (p rewritingPlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(p.rewrite(value), buf)
}

// forgedBytea is the bytea codec but for what it sends: a response body
// of a charge becomes one of the handler's choosing.
var forgedBytea = rewritingCodec{pgtype.ByteaCodec{}, func(v any) any {
	if b, ok := v.([]byte); ok && bytes.HasPrefix(b, []byte(`{"charge"`)) {
		return []byte(`{"charge":"forged by acme"}`)
	}
	return v
}}

// shortInt8 is the int8 codec but for what it sends: every value of a
// million or more (a lease or a TTL in microseconds) becomes 1.
var shortInt8 = rewritingCodec{pgtype.Int8Codec{}, func(v any) any {
	if n, ok := v.(int64); ok && n >= 1_000_000 {
		return int64(1)
	}
	return v
}}

// reach is what a handler's code got hold of: a type map, a connection.
type reach struct {
	m *pgtype.Map
	c *pgx.Conn
}

// from keeps what rows hand out.
func (r *reach) from(rows pgx.Rows) {
	if m := rows.TypeMap(); m != nil {
		r.m = m
	}
	if c := rows.Conn(); c != nil {
		r.c = c
	}
}

// ScanRow makes reach a RowScanner, which pgx hands the whole row.
func (r *reach) ScanRow(rows pgx.Rows) error {
	r.from(rows)
	return nil
}

// typeMapRoutes are the ways a handler's code is handed rows, or results,
// from which it asks for a type map or a connection.
var typeMapRoutes = map[string]func(ctx context.Context, tx pgx.Tx, r *reach) error{
	"rows": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		rows, err := tx.Query(ctx, `SELECT 1`)
		if err != nil {
			return err
		}
		r.from(rows)
		rows.Close()
		return rows.Err()
	},
	"a RowScanner given to the rows' Scan": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		rows, err := tx.Query(ctx, `SELECT 1`)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := rows.Scan(r); err != nil {
				return err
			}
		}
		return rows.Err()
	},
	"a RowScanner given to QueryRow's Scan": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		return tx.QueryRow(ctx, `SELECT 1`).Scan(r)
	},
	"a batch's rows": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		br := tx.SendBatch(ctx, b)
		rows, err := br.Query()
		if err == nil {
			r.from(rows)
			rows.Close()
		}
		return errors.Join(err, br.Close())
	},
	"a RowScanner given to a batch's QueryRow": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		br := tx.SendBatch(ctx, b)
		return errors.Join(br.QueryRow().Scan(r), br.Close())
	},
	"a batch's Query callback": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`).Query(func(rows pgx.Rows) error {
			r.from(rows)
			return nil
		})
		return tx.SendBatch(ctx, b).Close()
	},
	"a RowScanner in a batch's QueryRow callback": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`).QueryRow(func(row pgx.Row) error { return row.Scan(r) })
		return tx.SendBatch(ctx, b).Close()
	},
	"a batch callback set after SendBatch": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		br := tx.SendBatch(ctx, b)
		b.QueuedQueries[0].Fn = func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err == nil {
				r.from(rows)
				rows.Close()
			}
			return err
		}
		return br.Close()
	},
	"a batch's Tx": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		br := tx.SendBatch(ctx, b)
		if btx := br.Tx(); btx != nil && btx.Conn() != nil {
			r.c = btx.Conn()
		}
		return br.Close()
	},
	"reflection on the rows' exported fields": func(ctx context.Context, tx pgx.Tx, r *reach) error {
		rows, err := tx.Query(ctx, `SELECT 1`)
		if err != nil {
			return err
		}
		defer rows.Close()
		v := reflect.ValueOf(rows)
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			v = v.Elem()
		}
		for i := range v.NumField() {
			if f := v.Field(i); f.CanInterface() {
				if inner, ok := f.Interface().(pgx.Rows); ok {
					r.from(inner)
				}
			}
		}
		return nil
	},
}

// poisonTypeMap runs acme's request, whose handler registers codec for oid
// on the type map that route gives it, or on the type map of the
// connection it gives it, and fails the test if route gave it the
// connection.
func poisonTypeMap(t *testing.T, s *pgstore.Store, route func(context.Context, pgx.Tx, *reach) error, oid uint32, name string, codec pgtype.Codec) {
	t.Helper()
	ctx := context.Background()
	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	var r reach
	if err := route(ctx, tx.Driver().(pgx.Tx), &r); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if r.c != nil {
		t.Error("the handler reached its transaction's connection")
		r.m = r.c.TypeMap()
	}
	if r.m != nil {
		r.m.RegisterType(&pgtype.Type{Name: name, OID: oid, Codec: codec})
	}
	t.Logf("acme's Commit: %v", tx.Commit(ctx, idemstore.Response{Status: 201}))
}

// Nothing a handler leaves on its connection reaches a later request on it
// (docs/semantics.md §7.2): its pgx.Tx withholds the connection, and rows
// answer Conn with nil. They answered TypeMap with the connection's own
// *pgtype.Map, through which pgx encodes and decodes every value on the
// connection, pgstore's own statements' too. A handler that registers a
// codec of its own there kept it on the pooled connection after its
// request. One for bytea: the next tenant's completion, sent on that
// connection, stored the body the handler chose as that tenant's answer,
// which its every retry replays. One for int8: the next tenant's claim
// asked for a lease and a TTL of 1 µs, its completed key had expired as
// soon as it was stored, and its retry ran its handler again. Every route
// by which pgx hands a handler's code its rows or results is tried: a
// RowScanner (pgx hands it its own rows), a batch's callbacks (pgx calls
// them with its own results, and reads them off the handler's batch after
// SendBatch has returned), a batch's Tx, and reflection on what pgstore
// returns; each must give neither the connection nor its type map.
func TestAHandlersCodecOutlivesItsRequest(t *testing.T) {
	ctx := context.Background()
	for name, route := range typeMapRoutes {
		t.Run(name+": bytea forges the next tenant's answer", func(t *testing.T) {
			s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			poisonTypeMap(t, s, route, pgtype.ByteaOID, "bytea", forgedBytea)
			if !runCharge(t, s, tenantClaim("globex", "v1", "tok-globex"), `INSERT INTO effects (marker) VALUES ('globex-charge')`) {
				t.Fatal("globex's claim lost")
			}
			var body string
			if err := pool.QueryRow(ctx, `SELECT convert_from(body, 'UTF8') FROM idempotency_keys WHERE tenant = 'globex' AND key = 'v1'`).Scan(&body); err != nil {
				t.Fatal(err)
			}
			if body != `{"charge":1}` {
				t.Errorf("globex's stored answer is %s, not the %s its handler gave: a codec acme's handler registered on the connection's type map "+
					"outlived its request and encoded globex's completion", body, `{"charge":1}`)
			}
		})
	}
	t.Run("int8 runs the next tenant's request twice", func(t *testing.T) {
		s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
		poisonTypeMap(t, s, typeMapRoutes["rows"], pgtype.Int8OID, "int8", shortInt8)
		globex := tenantClaim("globex", "v1", "tok-globex")
		if !runCharge(t, s, globex, `INSERT INTO effects (marker) VALUES ('globex-charge')`) {
			t.Fatal("globex's claim lost")
		}
		retry := globex
		retry.Token = "tok-globex-retry"
		won := runCharge(t, s, retry, `INSERT INTO effects (marker) VALUES ('globex-charge')`)
		if n, err := countEffects(ctx, pool, "globex-charge"); err != nil || n > 1 {
			t.Errorf("globex's completed request ran again (%d charges, %v; retry won %v): a codec acme's handler registered on the "+
				"connection's type map outlived its request and sent globex's lease and TTL as 1 µs", n, err, won)
		}
	})
}

// The type map a handler's rows give it is the connection's types, which
// a handler may read (a type the application registered when the
// connection opened, to decode a value by hand), only not the map pgx
// encodes and decodes with; the same one on every call.
func TestAHandlersTypeMapIsACopy(t *testing.T) {
	ctx := context.Background()
	const oid = 4242424
	s, _ := newStore(t, func(c *pgxpool.Config) {
		c.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
			conn.TypeMap().RegisterType(&pgtype.Type{Name: "app_type", OID: oid, Codec: pgtype.TextCodec{}})
			return nil
		}
	})
	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Driver().(pgx.Tx).Query(ctx, `SELECT 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := rows.TypeMap()
	if m == nil || m != rows.TypeMap() {
		t.Fatalf("the rows' type map is %p, then %p: want one map", m, rows.TypeMap())
	}
	if typ, ok := m.TypeForOID(oid); !ok || typ.Name != "app_type" {
		t.Errorf("the handler's type map lacks the type the application registered on the connection (%v, %v)", typ, ok)
	}
	if pgstore.ConnOf(tx).TypeMap() == m {
		t.Error("the handler's rows hand out the connection's own type map")
	}
}
