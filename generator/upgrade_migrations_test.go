package generator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// olderOutput writes what an idemgen that knew only the key table's
// migration wrote: everything but the migrations after the first.
func olderOutput(t *testing.T, opts Options) {
	t.Helper()
	if err := WriteDir(opts.Dir, generate(t, opts)); err != nil {
		t.Fatal(err)
	}
	later, err := filepath.Glob(filepath.Join(opts.Dir, "db", "migrations", "*_idempotency_[po]*.sql"))
	if err != nil || len(later) == 0 {
		t.Fatalf("no later migrations to remove: %v %v", later, err)
	}
	for _, p := range later {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// A directory that an earlier idemgen wrote holds the key table's
// migration alone: --check reports the recovery points' and the outbox's
// as missing (not as a rewrite of a released migration), and the next
// generate adds them at the following versions, the first left as it is.
func TestUpgradeAddsFollowingMigrations(t *testing.T) {
	for _, version := range []string{"", "20260301120000"} {
		opts := project(t, "24h")
		opts.MigrationVersion = version
		olderOutput(t, opts)
		first := "db/migrations/000001_idempotency_keys.up.sql"
		next := []string{"000002_idempotency_phases.up.sql", "000002_idempotency_phases.down.sql",
			"000003_idempotency_outbox.up.sql", "000003_idempotency_outbox.down.sql"}
		if version != "" {
			first = "db/migrations/20260301120000_idempotency_keys.up.sql"
			next = []string{"20260301120001_idempotency_phases.up.sql", "20260301120001_idempotency_phases.down.sql",
				"20260301120002_idempotency_outbox.up.sql", "20260301120002_idempotency_outbox.down.sql"}
		}
		before, err := os.ReadFile(filepath.Join(opts.Dir, filepath.FromSlash(first)))
		if err != nil {
			t.Fatal(err)
		}
		files := generate(t, opts)
		diff, ok := CheckDir(opts.Dir, files)
		if ok {
			t.Fatalf("version %q: Check found nothing missing", version)
		}
		for _, n := range next {
			wantAll(t, diff, "db/migrations/"+n+": missing; run idemgen generate")
		}
		if strings.Count(diff, "\n") != len(next) {
			t.Errorf("version %q: Check reports more than the missing migrations:\n%s", version, diff)
		}
		if err := WriteDir(opts.Dir, files); err != nil {
			t.Fatal(err)
		}
		if diff, ok := CheckDir(opts.Dir, generate(t, opts)); !ok {
			t.Errorf("version %q: Check after the upgrade:\n%s", version, diff)
		}
		if after, _ := os.ReadFile(filepath.Join(opts.Dir, filepath.FromSlash(first))); string(after) != string(before) {
			t.Errorf("version %q: the first migration changed", version)
		}
	}
}

// The application's migration after idemgen's first: the recovery points'
// migration, new, would be skipped beside it, and is refused; the version
// the diagnostic names is the new migration's, not the first one's, and
// the way out it names is not another first version, which would renumber
// the migration already there.
func TestUpgradeBehindApplicationMigrationIsRefused(t *testing.T) {
	opts := project(t, "24h")
	olderOutput(t, opts)
	writeFile(t, opts.Dir, "db/migrations/000002_create_users.up.sql", "CREATE TABLE users (id int);\n")
	got := refused(t, opts)
	wantAll(t, got, "db/migrations/000002_create_users.up.sql: ",
		"new migration has version 2, not greater than this migration's 2", "keep their versions", "--migration-table")
	if strings.Contains(got, "migrationVersion:") {
		t.Errorf("%q suggests a first version, which would renumber the migration already there", got)
	}
}

// A later migration of idemgen's under another version: the version to
// keep it names the first migration's, which puts this one where it is.
func TestRenumberedFollowingMigrationNamesFirstVersion(t *testing.T) {
	opts := project(t, "24h")
	olderOutput(t, opts)
	files := generate(t, opts)
	writeFile(t, opts.Dir, "db/migrations/000008_idempotency_phases.up.sql",
		string(files["db/migrations/000002_idempotency_phases.up.sql"]))
	wantAll(t, refused(t, opts), "db/migrations/000008_idempotency_phases.up.sql: ",
		"already here under version 8", "migrationVersion: 000007")
}
