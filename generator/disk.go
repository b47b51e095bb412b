package generator

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/idemgen/idemgen/generator/gocode"
	"github.com/idemgen/idemgen/generator/model"
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

// staleFiles lists idemgen's Go files in the directories of the Go files of
// files that files does not hold. Only files named *.idem.go whose first
// line is idemgen's header count, so a user's own file is never touched.
func staleFiles(dir string, files map[string][]byte) ([]string, error) {
	dirs := make(map[string]bool)
	for p := range files {
		if strings.HasSuffix(p, gocode.Suffix) {
			dirs[path.Dir(p)] = true
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
			if e.IsDir() || !strings.HasSuffix(e.Name(), gocode.Suffix) {
				continue
			}
			if _, ok := files[p]; ok {
				continue
			}
			generated, err := hasHeader(resolveIn(dir, filepath.FromSlash(p)), gocode.Header)
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
// rewritten: migration tools record which versions they applied and never
// look at a file again, so an edited migration would leave databases that
// applied the old one silently behind. It also refuses a version number
// that another migration in the same directory already uses.
func checkMigrations(dir string, migrations map[string][]byte) ([]model.Diagnostic, error) {
	var diags []model.Diagnostic
	checkedDirs := make(map[string]bool)
	for _, p := range sortedKeys(migrations) {
		full := resolveIn(dir, filepath.FromSlash(p))
		old, err := os.ReadFile(full)
		switch {
		case err == nil && !bytes.Equal(old, migrations[p]):
			diags = append(diags, model.Diagnostic{
				Severity: model.Error,
				Pos:      model.Pos{File: p},
				Message: "this migration already exists and differs from the one idemgen generates now; " +
					"idemgen never rewrites a migration. If it was never applied anywhere, delete it and run idemgen again; " +
					"if it was applied, keep it and write an upgrade migration by hand " +
					"(generate into an empty --migrations directory to see the new schema)",
			})
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("read existing migration: %w", err)
		}

		d := path.Dir(p)
		if checkedDirs[d] {
			continue
		}
		checkedDirs[d] = true
		ours := make(map[string]bool)
		for q := range migrations {
			if path.Dir(q) == d {
				ours[path.Base(q)] = true
			}
		}
		entries, err := os.ReadDir(filepath.Dir(full))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read migrations directory: %w", err)
		}
		version := migrationVersion(path.Base(p))
		for _, e := range entries {
			if e.IsDir() || ours[e.Name()] {
				continue
			}
			if v := migrationVersion(e.Name()); v != "" && v == version {
				diags = append(diags, model.Diagnostic{
					Severity: model.Error,
					Pos:      model.Pos{File: path.Join(d, e.Name())},
					Message: fmt.Sprintf("migration version %s is already taken by this file; "+
						"give idemgen's migrations a directory of their own with --migrations", version),
				})
			}
		}
	}
	return diags, nil
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
