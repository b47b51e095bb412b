package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A handler must not be able to make the store's table name another
// relation for the statements pgstore runs (docs/semantics.md §7.2): a
// search_path set on the handler's session or transaction is caught. A
// search_path set on the handler's role (ALTER ROLE CURRENT_USER SET,
// which any role may do for itself, inside a transaction) is not: it
// leaves the session as it was, the transaction's end finds the name
// resolving where it did, and the handler's request commits. Every
// connection the pool opens afterwards (a replica that starts, a
// connection that is recycled) finds idempotency_keys in the handler's
// schema, an empty table there, and claims every key of every tenant
// afresh: another tenant's completed request runs a second time.
//
// The role here is one an application commonly runs as: it owns the
// schema of the store's tables (it ran the migration) and may create
// schemas in its database, and the database's administrator set its
// search_path to that schema. The settings for the role in this database
// alone are the same, and so is a setting taken away (RESET), which
// gives later sessions the default search_path: the handler's request is
// not committed, and its role's settings stand as they were.
func TestAHandlersRoleSearchPathReopensAnotherTenantsKey(t *testing.T) {
	cases := map[string]string{
		"role":                     `ALTER ROLE CURRENT_USER SET search_path = {evil}, {schema}`,
		"role in this database":    `ALTER ROLE CURRENT_USER IN DATABASE {db} SET search_path = {evil}, {schema}`,
		"role's search_path reset": `ALTER ROLE CURRENT_USER RESET search_path`,
	}
	for name, setting := range cases {
		t.Run(name, func(t *testing.T) { roleSettingReopensAnotherTenantsKey(t, setting) })
	}
}

func roleSettingReopensAnotherTenantsKey(t *testing.T, setting string) {
	r := newRoleStore(t, "{schema}")
	s := pgstore.New(r.pool())

	// The globex's request runs and completes.
	globex := tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, r.replace(`INSERT INTO {schema}.effects (marker) VALUES ('globex-charge')`)) {
		t.Fatal("globex's first claim lost")
	}

	// Another tenant's handler sets its role's search_path.
	mcommit := r.handlerCommits(t, s, `CREATE SCHEMA {evil}`,
		`CREATE TABLE {evil}.idempotency_keys (LIKE {schema}.idempotency_keys INCLUDING ALL)`,
		setting)
	if mcommit == nil {
		t.Errorf("acme's request committed a change to its role's settings (%s)", setting)
	}

	// A replica that starts afterwards (or any connection opened since)
	// meets globex's retry.
	r.wantReplay(t, globex, mcommit)
}

// roleStore is a store whose connections log in as a role of their own,
// one an application commonly runs as: it owns the schema of the store's
// tables (it ran the migration) and may create schemas in its database,
// and the database's administrator set its search_path.
type roleStore struct {
	url, role, schema, evil, db string
	admin                       *pgx.Conn
	pool                        func() *pgxpool.Pool
}

// newRoleStore makes the role, its schema and the store's tables in it,
// with the role's search_path set to searchPath ({schema} is its schema),
// and drops them all when the test ends. Its pool opens a new pool of the
// role's connections, a replica that starts.
func newRoleStore(t *testing.T, searchPath string) *roleStore {
	ctx := context.Background()
	r := &roleStore{url: testURL(t), role: "idemtest_role_" + randomHex(6), schema: "idemtest_" + randomHex(6), evil: "idemtest_evil_" + randomHex(6)}
	admin, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	r.admin = admin
	if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&r.db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE ROLE ` + r.role + ` LOGIN`,
		`GRANT CREATE ON DATABASE ` + pgx.Identifier{r.db}.Sanitize() + ` TO ` + r.role,
		`CREATE SCHEMA ` + r.schema + ` AUTHORIZATION ` + r.role,
		`ALTER ROLE ` + r.role + ` SET search_path = ` + r.replace(searchPath),
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), r.url)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		for _, q := range []string{
			`SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usename = '` + r.role + `'`,
			`DROP SCHEMA IF EXISTS ` + r.evil + ` CASCADE`,
			`DROP SCHEMA IF EXISTS ` + r.role + ` CASCADE`,
			`DROP SCHEMA IF EXISTS ` + r.schema + ` CASCADE`,
			`DROP OWNED BY ` + r.role,
			`DROP ROLE ` + r.role,
		} {
			if _, err := c.Exec(context.Background(), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	r.pool = func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(r.url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.User = r.role
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closePool(t, pool) })
		return pool
	}
	pool := r.pool()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+r.schema+`.effects (marker text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return r
}

// replace puts the role's names in q: {role}, {schema}, {evil}, {db}.
func (r *roleStore) replace(q string) string {
	return strings.NewReplacer("{role}", r.role, "{evil}", r.evil, "{schema}", r.schema, "{db}", pgx.Identifier{r.db}.Sanitize()).Replace(q)
}

// handlerCommits runs stmts as the handler of acme's request, a won
// transactional claim on s, and returns what its Commit returned.
func (r *roleStore) handlerCommits(t *testing.T, s *pgstore.Store, stmts ...string) error {
	t.Helper()
	return r.handlerCommitsKey(t, s, "m1", "tok-acme", stmts...)
}

// handlerCommitsKey is handlerCommits for acme's request of key, with
// token.
func (r *roleStore) handlerCommitsKey(t *testing.T, s *pgstore.Store, key, token string, stmts ...string) error {
	t.Helper()
	ctx := context.Background()
	tx := wonClaimTx(t, s, tenantClaim("acme", key, token))
	steps := handlerSteps{h: tx.Driver().(pgx.Tx)}
	for _, q := range stmts {
		q = r.replace(q)
		if err := steps.exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q, err)
		}
	}
	err := tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("acme's Commit: %v", err)
	return err
}

// wantReplay retries globex's completed claim c on a new pool, a replica
// that starts after acme's request, and fails the test if its handler's
// write then committed twice.
func (r *roleStore) wantReplay(t *testing.T, c idemstore.Claim, acmeCommit error) {
	t.Helper()
	r.wantReplayOn(t, pgstore.New(r.pool()), c, "globex-charge", acmeCommit)
}

// wantReplayOn retries the completed claim c on s, whose handler writes
// marker, and fails the test if the write then committed twice.
func (r *roleStore) wantReplayOn(t *testing.T, s *pgstore.Store, c idemstore.Claim, marker string, acmeCommit error) {
	t.Helper()
	retry := c
	retry.Token += "-retry"
	won := runCharge(t, s, retry, `INSERT INTO `+r.schema+`.effects (marker) VALUES ('`+marker+`')`)
	var n int
	if err := r.admin.QueryRow(context.Background(), `SELECT count(*) FROM `+r.schema+`.effects WHERE marker = $1`, marker).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Errorf("another tenant's completed request (%s) ran again (its write committed %d times): acme's request committed (%v), "+
			"and globex's retry on a new connection won its key (%v)", c.Key, n, acmeCommit, won)
	}
}

// What the names in pgstore's statements and in its functions' bodies
// resolve to, on every session opened afterwards, a handler cannot change
// from its request's transaction (docs/semantics.md §7.2). With the
// search_path an application's role commonly has, "$user" first, a
// handler whose role may create schemas makes one named after its role,
// and the names found there come before the store's schema: a keys table
// (hidden from the transaction's own end by SET LOCAL search_path), or an
// idempotency_claim that answers every claim as a fresh one. An operator
// that matches the arguments better than pg_catalog's needs no schema of
// its own: a bigint * interval, in the store's own schema, that the claim's
// lease and expiry meet. In each, acme's request must not commit, or
// globex's keys, claimed and completed before or after it, must still be
// decided as they were on a new connection: a completed key replays, and
// a key whose holder was lost with its lease fails closed.
func TestAHandlersSchemaAfterItsRoleReopensAnotherTenantsKey(t *testing.T) {
	// wonClaimFunc answers every claim as a fresh one, won.
	const wonClaimFunc = `CREATE FUNCTION {role}.idempotency_claim(
	    p_tenant text, p_scope text, p_key text, p_operation text, p_fingerprint bytea, p_token text,
	    p_lease_us bigint, p_ttl_us bigint, p_takeover boolean, p_hold boolean,
	    OUT r_outcome text, OUT r_state text, OUT r_operation text, OUT r_fingerprint bytea,
	    OUT r_lease_remaining_us bigint, OUT r_status integer, OUT r_headers bytea, OUT r_body bytea,
	    OUT r_body_omitted boolean)
	LANGUAGE sql AS $$ SELECT 'won'::text, NULL::text, NULL::text, NULL::bytea, NULL::bigint,
	                          NULL::integer, NULL::bytea, NULL::bytea, NULL::boolean $$`
	cases := map[string][]string{
		"keys table": {
			`CREATE SCHEMA {role}`,
			`CREATE TABLE {role}.idempotency_keys (LIKE {schema}.idempotency_keys INCLUDING ALL)`,
			`SET LOCAL search_path = {schema}`,
		},
		"claim function": {
			`CREATE SCHEMA {role}`,
			wonClaimFunc,
		},
		"claim function in a savepoint": {
			`SAVEPOINT s`,
			`CREATE SCHEMA {role}`,
			wonClaimFunc,
			`RELEASE SAVEPOINT s`,
		},
		"operator in the store's schema": {
			`CREATE FUNCTION {schema}.past(bigint, interval) RETURNS interval LANGUAGE sql IMMUTABLE AS $$ SELECT interval '-1 hour' $$`,
			`CREATE OPERATOR {schema}.* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = {schema}.past)`,
		},
	}
	for name, stmts := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := newRoleStore(t, `"$user", {schema}`)
			s := pgstore.New(r.pool())
			charge := func(marker string) string {
				return `INSERT INTO ` + r.schema + `.effects (marker) VALUES ('` + marker + `')`
			}

			// Before acme's request, globex completes one request, and
			// loses the holder of another, which must fail closed.
			completed := tenantClaim("globex", "v1", "tok-v1")
			if !runCharge(t, s, completed, charge("v1")) {
				t.Fatal("globex's first claim lost")
			}
			const lease = 500 * time.Millisecond
			lost := tenantClaim("globex", "v2", "tok-v2")
			lost.Lease, lost.OnLeaseExpiry = lease, idemstore.FailClosed
			if res, err := s.Claim(ctx, lost); err != nil || !res.Won {
				t.Fatalf("globex's claim of v2 = %+v, %v", res, err)
			}
			leaseOver := time.Now().Add(lease + 300*time.Millisecond)

			acme := r.handlerCommits(t, s, stmts...)

			// A replica that starts afterwards serves globex's retries,
			// and a request of globex's made after acme's.
			s2 := pgstore.New(r.pool())
			r.wantReplayOn(t, s2, completed, "v1", acme)
			time.Sleep(time.Until(leaseOver))
			retry := lost
			retry.Token = "tok-v2-retry"
			if res, err := s2.Claim(ctx, retry); err != nil || res.Won {
				t.Errorf("globex's retry of a key whose holder was lost with its lease, under fail-closed, = %+v, %v; want it not won "+
					"(acme's request committed: %v)", res, err, acme)
			}
			after := tenantClaim("globex", "v3", "tok-v3")
			if runCharge(t, s2, after, charge("v3")) {
				r.wantReplayOn(t, s2, after, "v3", acme)
			}
		})
	}
}
