package generator

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/idemgen/idemgen/generator/gocode"
	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/generator/sqlgen"
)

// Write puts files on disk, relative to the current directory.
func Write(files map[string][]byte) error {
	return WriteDir("", files)
}

// WriteDir puts files on disk relative to dir ("" is the current
// directory). A file whose content is already right is left untouched, and
// stale idemgen files in the Go output directories (see Check) are removed.
func WriteDir(dir string, files map[string][]byte) error {
	for _, p := range sortedKeys(files) {
		full := resolveIn(dir, filepath.FromSlash(p))
		if old, err := os.ReadFile(full); err == nil && bytes.Equal(old, files[p]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	stale, err := staleFiles(dir, files)
	if err != nil {
		return err
	}
	for _, p := range stale {
		if err := os.Remove(resolveIn(dir, filepath.FromSlash(p))); err != nil {
			return fmt.Errorf("remove stale %s: %w", p, err)
		}
	}
	return nil
}

// Check compares files with the disk, relative to the current directory.
func Check(files map[string][]byte) (diff string, ok bool) {
	return CheckDir("", files)
}

// CheckDir compares files with the disk relative to dir. It reports every
// file that is missing, differs (as a unified diff from the disk to what
// would be generated) or is stale: a Go file that idemgen generated (named
// *.idem.go and starting with its header) in one of the Go output
// directories, which this generation would not produce. ok is true when
// there is nothing to report.
func CheckDir(dir string, files map[string][]byte) (diff string, ok bool) {
	var b strings.Builder
	for _, p := range sortedKeys(files) {
		full := resolveIn(dir, filepath.FromSlash(p))
		old, err := os.ReadFile(full)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(&b, "%s: missing; run idemgen generate\n", p)
			continue
		case err != nil:
			fmt.Fprintf(&b, "%s: cannot read: %v\n", p, err)
			continue
		}
		if bytes.Equal(old, files[p]) {
			continue
		}
		ud := difflib.UnifiedDiff{
			A:        difflib.SplitLines(string(old)),
			B:        difflib.SplitLines(string(files[p])),
			FromFile: p + " (on disk)",
			ToFile:   p + " (generated)",
			Context:  3,
		}
		text, err := difflib.GetUnifiedDiffString(ud)
		if err != nil {
			fmt.Fprintf(&b, "%s: differs (diff failed: %v)\n", p, err)
			continue
		}
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteString("\n\\ No newline at end of file\n")
		}
	}
	stale, err := staleFiles(dir, files)
	if err != nil {
		fmt.Fprintf(&b, "%v\n", err)
	}
	for _, p := range stale {
		fmt.Fprintf(&b, "%s: stale idemgen file that this spec no longer generates; delete it or run idemgen generate\n", p)
	}
	return b.String(), b.Len() == 0
}

// staleFiles lists idemgen's own files that files does not hold, in the
// directories this generation writes to: Go files (*.idem.go) beside the
// generated Go code, and migrations and their README in the migrations
// directory, its dialect subdirectories, or its parent when it is one of
// them, where a change of the dialect list leaves them. Only files whose
// name is one idemgen gives and whose first line is idemgen's header
// count, so a user's own file is never touched.
func staleFiles(dir string, files map[string][]byte) ([]string, error) {
	type owned func(name string) (header string, ok bool)
	goFile := func(name string) (string, bool) { return gocode.Header, strings.HasSuffix(name, gocode.Suffix) }
	migration := func(name string) (string, bool) {
		if name == sqlgen.ReadmeName {
			return sqlgen.ReadmeHeader, true
		}
		return sqlgen.Header, sqlgen.IsMigrationName(name)
	}
	dirs := make(map[string]owned)
	migDirs := make(map[string]bool)
	for p := range files {
		switch {
		case strings.HasSuffix(p, gocode.Suffix):
			dirs[path.Dir(p)] = goFile
		case sqlgen.IsMigrationName(path.Base(p)):
			migDirs[path.Dir(p)] = true
		}
	}
	for d := range migDirs {
		dirs[d] = migration
		for _, dialect := range sqlgen.Dialects {
			dirs[path.Join(d, dialect)] = migration
		}
		// Every dialect in a subdirectory of its own: the parent is the
		// migrations directory, where one dialect's files were before.
		parent, all := path.Dir(d), true
		for _, dialect := range sqlgen.Dialects {
			all = all && migDirs[path.Join(parent, dialect)]
		}
		if all {
			dirs[parent] = migration
		}
	}
	var stale []string
	for _, d := range sortedKeys(dirs) {
		entries, err := os.ReadDir(resolveIn(dir, filepath.FromSlash(d)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look for stale files: %w", err)
		}
		for _, e := range entries {
			p := path.Join(d, e.Name())
			header, ok := dirs[d](e.Name())
			if e.IsDir() || !ok {
				continue
			}
			if _, ok := files[p]; ok {
				continue
			}
			generated, err := hasHeader(resolveIn(dir, filepath.FromSlash(p)), header)
			if err != nil {
				return nil, fmt.Errorf("look for stale files: %w", err)
			}
			if generated {
				stale = append(stale, p)
			}
		}
	}
	return stale, nil
}

// hasHeader reports whether the file's first line is header.
func hasHeader(file, header string) (bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, len(header)+2)
	n, _ := f.Read(buf)
	line := string(buf[:n])
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = strings.TrimSuffix(line[:i], "\r")
	}
	return line == header, nil
}

// checkMigrations enforces that a migration, once on disk, is never
// rewritten or renumbered (one whose comments alone differ from what
// idemgen writes now is kept as it is, and counts as current): migration tools record which versions they
// applied and never look at a file again, so an edited migration would
// leave databases that applied the old one silently behind, and a
// renumbered one would be applied twice. It also refuses a new migration
// that its tool would not apply (see refuseSkipped), and, with a
// migrations table of idemgen's own, a directory shared with other
// migrations.
func checkMigrations(base string, opts Options, migrations map[string][]byte) ([]model.Diagnostic, error) {
	var diags []model.Diagnostic
	fail := func(file, msg string) {
		diags = append(diags, model.Diagnostic{Severity: model.Error, Pos: model.Pos{File: file}, Message: msg})
	}
	// A new migration: one that is not on disk yet. Only a new one can be
	// skipped; one already there was placed when it was new.
	// fresh holds each directory's new migration of the lowest version,
	// by file name: an upgrade of idemgen adds migrations after the ones
	// already there.
	fresh := make(map[string]string)
	for _, p := range sortedKeys(migrations) {
		if !sqlgen.IsMigrationName(path.Base(p)) {
			continue // the README is regenerated like any other file
		}
		old, err := os.ReadFile(resolveIn(base, filepath.FromSlash(p)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			base, d := path.Base(p), path.Dir(p)
			if low, ok := fresh[d]; !ok || sqlgen.CompareVersions(migrationPrefix(base), migrationPrefix(low)) < 0 {
				fresh[d] = base
			}
		case err != nil:
			return nil, fmt.Errorf("read existing migration: %w", err)
		case sqlgen.SameStatements(old, migrations[p]):
			// Only comments differ: the file on disk stays as it is.
			migrations[p] = old
		default:
			fail(p, "this migration already exists and differs from the one idemgen generates now; "+
				"idemgen never rewrites a migration. If it was never applied anywhere, delete it and run idemgen again; "+
				"if it was applied, keep it and write an upgrade migration by hand "+
				"(generate into an empty --migrations directory to see the new schema)")
		}
	}

	for _, d := range sortedKeys(migrationDirs(migrations)) {
		entries, err := os.ReadDir(resolveIn(base, filepath.FromSlash(d)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read migrations directory: %w", err)
		}
		var others []string // the user's migrations, by file name
		for _, e := range entries {
			p := path.Join(d, e.Name())
			if _, ok := migrations[p]; ok || e.IsDir() {
				continue
			}
			if sqlgen.IsMigrationName(e.Name()) {
				mine, err := hasHeader(resolveIn(base, filepath.FromSlash(p)), sqlgen.Header)
				if err != nil {
					return nil, fmt.Errorf("read migrations directory: %w", err)
				}
				if mine {
					fail(p, fmt.Sprintf("idemgen's migration is already here under version %s (or another layout); "+
						"idemgen never renumbers a migration, which would apply it twice. "+
						"Keep it with migrationVersion: %s (--migration-version), or delete it if it was never applied anywhere",
						migrationVersion(e.Name()), firstVersion(e.Name())))
					continue
				}
			}
			if migrationVersion(e.Name()) != "" {
				others = append(others, e.Name())
			}
		}
		if len(others) == 0 {
			continue
		}
		if opts.MigrationTable != "" {
			fail(path.Join(d, others[0]), fmt.Sprintf("a migrations table of idemgen's own (%s) needs a directory of its own, "+
				"and this migration is not idemgen's: give --migrations a directory that holds only idemgen's migrations", opts.MigrationTable))
			continue
		}
		if name, ok := fresh[d]; ok {
			if diag, ok := refuseSkipped(d, name, others, opts.Layout); ok {
				diags = append(diags, diag)
			}
		}
	}
	return diags, nil
}

// migrationDirs returns the directories of the migration files of files.
func migrationDirs(files map[string][]byte) map[string]bool {
	dirs := make(map[string]bool)
	for p := range files {
		if sqlgen.IsMigrationName(path.Base(p)) {
			dirs[path.Dir(p)] = true
		}
	}
	return dirs
}

// refuseSkipped returns an error when idemgen's new migration of file
// name fresh would not be applied beside the migrations others in
// directory d: golang-migrate only applies versions above the database's
// current one and skips the rest without a word, and goose refuses a
// version below its latest unless run with -allow-missing. dbmate applies
// every version it has not applied, in any order, so it needs no check.
// When fresh follows idemgen's migrations already there, another first
// version would renumber those, so the one way out is a directory and
// table of idemgen's own.
func refuseSkipped(d, fresh string, others []string, layout string) (model.Diagnostic, bool) {
	version := migrationVersion(fresh)
	if layout == sqlgen.LayoutDbmate {
		return model.Diagnostic{}, false
	}
	top := ""
	for _, name := range others {
		if top == "" || sqlgen.CompareVersions(migrationPrefix(name), migrationPrefix(top)) > 0 {
			top = name
		}
	}
	if sqlgen.CompareVersions(version, migrationPrefix(top)) > 0 {
		return model.Diagnostic{}, false
	}
	what := "golang-migrate would skip it, without an error, on every database that applied this one, and every keyed request would then fail"
	if layout == sqlgen.LayoutGoose {
		what = "goose would refuse to migrate every database that applied this one"
	}
	own := "give idemgen's migrations a directory and a migrations table of their own (migrationTable, --migration-table)"
	fix := "Give it a greater version, such as migrationVersion: %[1]s (--migration-version), or " + own
	if sqlgen.Index(fresh) > 0 {
		// The version follows idemgen's earlier migrations, which keep theirs.
		fix = "It follows idemgen's migrations already here, which keep their versions: " + own +
			"; its first migration is applied again there, harmlessly"
	}
	next := new(big.Int)
	next.SetString(migrationPrefix(top), 10)
	next.Add(next, big.NewInt(1))
	return model.Diagnostic{
		Severity: model.Error,
		Pos:      model.Pos{File: path.Join(d, top)},
		Message: fmt.Sprintf("idemgen's new migration has version %s, not greater than this migration's %s: %s. ",
			version, migrationVersion(top), what) + fmt.Sprintf(fix, next.String()),
	}, true
}

// firstVersion returns the version that the first of idemgen's
// migrations has when the migration named name has the version it starts
// with: the one to give --migration-version to keep it where it is.
func firstVersion(name string) string {
	prefix := migrationPrefix(name)
	first, ok := new(big.Int).SetString(prefix, 10)
	if !ok {
		return prefix
	}
	first.Sub(first, big.NewInt(int64(max(sqlgen.Index(name), 0))))
	if first.Sign() <= 0 {
		return prefix
	}
	s := first.String()
	if len(s) < len(prefix) {
		s = strings.Repeat("0", len(prefix)-len(s)) + s
	}
	return s
}

// migrationPrefix returns the digits a migration file name starts with.
func migrationPrefix(name string) string {
	i := 0
	for i < len(name) && name[i] >= '0' && name[i] <= '9' {
		i++
	}
	return name[:i]
}

// migrationVersion returns the numeric version a migration file name
// starts with, without leading zeros ("000001_x.up.sql" → "1"), or "" when
// the name does not start with digits and an underscore.
func migrationVersion(name string) string {
	i := 0
	for i < len(name) && name[i] >= '0' && name[i] <= '9' {
		i++
	}
	if i == 0 || i == len(name) || name[i] != '_' {
		return ""
	}
	v, err := strconv.ParseUint(name[:i], 10, 64)
	if err != nil {
		return name[:i]
	}
	return strconv.FormatUint(v, 10)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
