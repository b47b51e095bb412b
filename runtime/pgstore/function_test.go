package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// pgstore calls idempotency_claim only when its fast read found no row that
// decides the claim, so in the store's own tests most of the function's
// branches run only in races. Called directly, on rows set up in each
// state, the function must decide every claim by itself, as its comment
// promises.
func TestClaimFunctionDecidesAlone(t *testing.T) {
	_, pool := newStore(t)
	ctx := context.Background()

	// Each row is written as it stands; "expired" rows are past their TTL,
	// "abandoned" ones in flight with their lease run out.
	setup := `INSERT INTO idempotency_keys
	  (tenant, scope, key, operation, fingerprint, state, lease_token, lease_until, expires_at, status, body)
	VALUES
	  ('t', 's', 'completed', 'op', '\x01', 'completed',     NULL,  NULL,                             now() + interval '1 hour', 201, 'b'),
	  ('t', 's', 'running',   'op', '\x01', 'in_flight',     'old', now() + interval '1 minute',      now() + interval '1 hour', NULL, NULL),
	  ('t', 's', 'abandoned', 'op', '\x01', 'in_flight',     'old', now() - interval '1 second',      now() + interval '1 hour', NULL, NULL),
	  ('t', 's', 'unknown',   'op', '\x01', 'indeterminate', 'old', now() - interval '1 second',      now() + interval '1 hour', NULL, NULL),
	  ('t', 's', 'expired',   'op', '\x01', 'completed',     NULL,  NULL,                             now() - interval '1 second', 200, 'x')`
	if _, err := pool.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		key, fingerprint string
		takeover         bool
		outcome, state   string
	}{
		{"new", `\x01`, true, "won", ""},
		{"completed", `\x01`, true, "lost", "completed"},
		{"completed", `\x02`, true, "mismatch", "completed"},
		{"running", `\x01`, true, "lost", "in_flight"},
		{"running", `\x02`, true, "mismatch", "in_flight"},
		{"abandoned", `\x02`, true, "mismatch", "in_flight"},
		{"abandoned", `\x01`, true, "took_over", ""},
		{"unknown", `\x01`, true, "lost", "indeterminate"},
		{"expired", `\x02`, true, "won", ""},
	}
	for _, c := range cases {
		var outcome, state pgtype.Text
		err := pool.QueryRow(ctx, `SELECT r_outcome, r_state
			FROM idempotency_claim('t', 's', $1, 'op', $2::bytea, 'new-token', 60000000, 3600000000, $3, false)`,
			c.key, c.fingerprint, c.takeover).Scan(&outcome, &state)
		if err != nil {
			t.Fatalf("claim %s: %v", c.key, err)
		}
		if outcome.String != c.outcome || state.String != c.state {
			t.Errorf("claim %s with fingerprint %s = (%s, %s), want (%s, %s)",
				c.key, c.fingerprint, outcome.String, state.String, c.outcome, c.state)
		}
	}

	// The winners hold their keys in flight with the new token.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys
		WHERE key IN ('new', 'abandoned', 'expired') AND state = 'in_flight' AND lease_token = 'new-token'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("%d of the 3 won keys hold the new token, want 3", n)
	}

	// Fail-closed marks an abandoned claim indeterminate and reports it.
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET lease_until = now() - interval '1 second', lease_token = 'old'
		WHERE key = 'abandoned'`); err != nil {
		t.Fatal(err)
	}
	var outcome, state pgtype.Text
	if err := pool.QueryRow(ctx, `SELECT r_outcome, r_state
		FROM idempotency_claim('t', 's', 'abandoned', 'op', '\x01', 'other', 60000000, 3600000000, false, false)`).Scan(&outcome, &state); err != nil {
		t.Fatal(err)
	}
	if outcome.String != "lost" || state.String != "indeterminate" {
		t.Errorf("fail-closed claim of an abandoned key = (%s, %s), want (lost, indeterminate)", outcome.String, state.String)
	}
}
