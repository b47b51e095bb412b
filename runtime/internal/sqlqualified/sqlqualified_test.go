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
		{`WITH due AS (SELECT 1) SELECT 'f(' || "g(" /* h( */ -- i(
, $$ j( $$, E'k\'(', idempotency_sweep($1) FROM unnest($1) AS o(a, b), LATERAL idempotency_lock_id(o.a)`, []string{"unnest"}},
	} {
		if got := Unqualified(c.sql, "idempotency_sweep", "idempotency_lock_id"); !slices.Equal(got, c.want) {
			t.Errorf("Unqualified(%q) = %q, want %q", c.sql, got, c.want)
		}
	}
}
