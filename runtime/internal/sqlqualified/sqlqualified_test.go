package sqlqualified

import (
	"slices"
	"testing"
)

// The outbox's List once called cardinality unqualified, and a
// cardinality(text[]) of a handler's making, which fits a text[] better
// than pg_catalog's anyarray, ran in it; the check names it, and only
// the calls that a search_path can change.
func TestUnqualifiedFindsCallsBySearchPath(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want []string
	}{
		{`SELECT o.id FROM idempotency_outbox o
 WHERE ($1 = '' OR o.tenant = $1) AND ($3 = '' OR (o.key = $3 AND o.scope = $2))
   AND ($6 = 0 OR o.id = $6)
   AND (cardinality($4::text[]) = 0 OR o.state = ANY($4))
 ORDER BY o.id
 LIMIT nullif($5, 0)`, []string{"cardinality"}},
		{`SELECT pg_catalog.cardinality($4::pg_catalog.text[]) OPERATOR(pg_catalog.=) 0`, nil},
		{`SELECT count(*) FILTER (WHERE state = 'x'), coalesce(min(a), 0), extract(epoch FROM b)`, []string{"count", "min"}},
		{`INSERT INTO "s"."idempotency_outbox" (tenant) VALUES ($1) ON CONFLICT (tenant) WHERE state = 'pending' DO NOTHING`, nil},
		{`INSERT INTO idempotency_keys AS k (tenant) VALUES (clock_timestamp())`, []string{"clock_timestamp"}},
		{`SELECT "lower"($1), pg_catalog."upper"($1), "pg_catalog".length($1)`, []string{`"lower"`}},
		{`WITH due AS (SELECT 1) SELECT 'f(' || "g(" /* h( */ -- i(
, $$ j( $$, E'k\'(', idempotency_sweep($1) FROM unnest($1) AS o(a, b), LATERAL idempotency_lock_id(o.a)`, []string{"unnest"}},
	} {
		if got := Unqualified(c.sql, "idempotency_sweep", "idempotency_lock_id"); !slices.Equal(got, c.want) {
			t.Errorf("Unqualified(%q) = %q, want %q", c.sql, got, c.want)
		}
	}
}

// pgstore's claim once compared the key's columns with = and read the
// clock with clock_timestamp() by the search_path: under a search_path
// that names pg_catalog after a schema the handler's role may create in
// (SET LOCAL search_path = s, pg_catalog, or a deployment's), an
// =(text, text) of the handler's that answers true found another
// tenant's row for the key. The check names every operator, cast and
// catalog relation found so, and none that is pg_catalog's by name or
// not an operator at all.
func TestOperatorsFindsOperatorsBySearchPath(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want []string
	}{
		{`SELECT k.state FROM (SELECT clock_timestamp() AS now) t
  LEFT JOIN idempotency_keys k
    ON k.tenant = $1::pg_catalog.text AND k.key = $3::text
   AND k.expires_at > t.now AND (k.state <> 'in_flight' OR k.lease_until >= t.now)`, []string{"=", "=", "::text", ">", "<>", ">="}},
		{`SELECT k.state FROM idempotency_keys k
 WHERE k.tenant OPERATOR(pg_catalog.=) $1::pg_catalog.text AND k.n OPERATOR(public.>) 1
   AND k.state OPERATOR(pg_catalog.=) ANY ('{a,b}'::pg_catalog.text[])`, []string{"public.>"}},
		{`UPDATE idempotency_keys k
   SET state = 'completed', n = n + 1, expires_at = CASE WHEN k.expires_at <= now() THEN 1 ELSE 2 END,
       body = $1::pg_catalog.bytea
 WHERE k.key IN ($2, $3) AND k.fingerprint IS DISTINCT FROM $4 AND k.tenant LIKE 'a%'
RETURNING *, k.*, pg_catalog.count(*), x * -2, x - 2`, []string{"+", "<=", "IN", "DISTINCT", "LIKE", "*", "-"}},
		{`INSERT INTO t AS p (a) VALUES ($1) ON CONFLICT (a) DO UPDATE SET a = excluded.a, b = p.b || 'x' WHERE p.c BETWEEN 1 AND 2`, []string{"||", "BETWEEN"}},
		{`SELECT CASE o.a WHEN 1 THEN nullif(o.b, 0) END, $4::bigint::oid, l.x::pg_catalog.int4
  FROM pg_locks o JOIN pg_catalog.pg_database d USING (oid) WHERE d.datname OPERATOR(pg_catalog.=) 'a=b' -- c = d
   /* e = f */ AND "g=" IS NULL`, []string{"CASE", "nullif", "::oid", "pg_locks", "USING"}},
		{`DELETE FROM t o USING (SELECT id FROM t) d WHERE o.id OPERATOR(pg_catalog.=) d.id`, nil},
		{`SELECT pg_catalog.make_interval(secs => 1), f(a => b = c)`, []string{"="}},
	} {
		if got := Operators(c.sql); !slices.Equal(got, c.want) {
			t.Errorf("Operators(%q) = %q, want %q", c.sql, got, c.want)
		}
	}
}

// The grammar compares with = by the search_path in IS NOT DISTINCT FROM
// and a NATURAL join, and finds a type by it in CAST(x AS type), a cast
// to a quoted name and a typed literal, and a collation in COLLATE: a
// schema of the handler's role put before pg_catalog chooses them as it
// chooses a written operator. Each is found, and none that names
// pg_catalog's, a word of the grammar, or a prefixed string constant.
func TestOperatorsFindsTheGrammarsComparisonsTypesAndCollations(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want []string
	}{
		{`SELECT 1 WHERE $1::pg_catalog.text IS NOT DISTINCT FROM $2::pg_catalog.text AND $3 IS NOT NULL`, []string{"DISTINCT"}},
		{`SELECT DISTINCT a FROM pg_catalog.pg_class a NATURAL JOIN pg_catalog.pg_class b`, []string{"NATURAL"}},
		{`SELECT CAST($1 AS text), CAST(CAST($2 AS "int") AS pg_catalog.int4), CAST($3 AS double precision), $4 AS text`,
			[]string{"::text", `::"int"`}},
		{`SELECT $1::"text", $2::"pg_catalog"."text", $3::pg_catalog."text"`, []string{`::"text"`}},
		{`SELECT oid '5', pg_catalog.oid '5', interval '1 millisecond', E'\'', x'ff', e '5'`, []string{"::oid", "::e"}},
		{`SELECT 1 WHERE $1::pg_catalog.text OPERATOR(pg_catalog.<) $2::pg_catalog.text COLLATE "C"
		     AND $1::pg_catalog.text OPERATOR(pg_catalog.<) $2::pg_catalog.text COLLATE pg_catalog."C"`, []string{`COLLATE "C"`}},
		{`SELECT 'a' LIKE 'b' ESCAPE '!', pg_catalog.now() AT TIME ZONE 'UTC', CASE WHEN true THEN 'x' ELSE 'y' END`, []string{"LIKE"}},
	} {
		if got := Operators(c.sql); !slices.Equal(got, c.want) {
			t.Errorf("Operators(%q) = %q, want %q", c.sql, got, c.want)
		}
	}
}
