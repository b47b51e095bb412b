package pgstore_test

import (
	"context"
	"strings"
	"testing"

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
	ctx := context.Background()
	url := testURL(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := "idemtest_role_" + randomHex(6)
	schema := "idemtest_" + randomHex(6)
	evil := "idemtest_evil_" + randomHex(6)
	var db string
	if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT CREATE ON DATABASE ` + pgx.Identifier{db}.Sanitize() + ` TO ` + role,
		`CREATE SCHEMA ` + schema + ` AUTHORIZATION ` + role,
		`ALTER ROLE ` + role + ` SET search_path = ` + schema,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		for _, q := range []string{
			`SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usename = '` + role + `'`,
			`DROP SCHEMA IF EXISTS ` + evil + ` CASCADE`,
			`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`,
			`DROP OWNED BY ` + role,
			`DROP ROLE ` + role,
		} {
			if _, err := c.Exec(context.Background(), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	rolePool := func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.User = role
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closePool(t, pool) })
		return pool
	}
	pool := rolePool()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (marker text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s := pgstore.New(pool)

	// The globex's request runs and completes.
	globex := tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, `INSERT INTO effects (marker) VALUES ('globex-charge')`) {
		t.Fatal("globex's first claim lost")
	}

	// Another tenant's handler sets its role's search_path.
	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	setting = strings.NewReplacer("{evil}", evil, "{schema}", schema, "{db}", pgx.Identifier{db}.Sanitize()).Replace(setting)
	for _, q := range []string{
		`CREATE SCHEMA ` + evil,
		`CREATE TABLE ` + evil + `.idempotency_keys (LIKE ` + schema + `.idempotency_keys INCLUDING ALL)`,
		setting,
	} {
		if _, err := tx.Driver().(pgx.Tx).Exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q, err)
		}
	}
	mcommit := tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("acme's Commit: %v", mcommit)
	if mcommit == nil {
		t.Errorf("acme's request committed a change to its role's settings (%s)", setting)
	}

	// A replica that starts afterwards (or any connection opened since)
	// meets globex's retry.
	s2 := pgstore.New(rolePool())
	retry := globex
	retry.Token = "tok-globex-retry"
	won := runCharge(t, s2, retry, `INSERT INTO `+schema+`.effects (marker) VALUES ('globex-charge')`)
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.effects WHERE marker = 'globex-charge'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Fatalf("another tenant's completed request ran again (its write committed %d times): acme's request, which set its role's search_path, committed (%v), "+
			"and globex's retry on a new connection won its key (%v) in acme's table", n, mcommit, won)
	}
}
