package idem_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// What a service builds when it imports the generated code and one store
// is the runtime and that store's driver, nothing else of idemgen's: not
// another store's driver, none of the generator's dependencies (cobra,
// kin-openapi, jennifer), and no router's (chi, gin, echo, ogen), which
// only their adapter packages import. Go's module graph pruning keeps a module out of
// the service's go.mod when no package it builds comes from it, so the
// packages' dependencies are what this holds.
func TestGeneratedCodeAndOneStoreStayLean(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	notBuilt := []string{"github.com/spf13/cobra", "github.com/getkin/kin-openapi", "github.com/dave/jennifer",
		"github.com/go-chi/chi/v5", "github.com/gin-gonic/gin", "github.com/labstack/echo/v4", "github.com/ogen-go/ogen"}
	drivers := map[string]string{
		"postgres": "github.com/jackc/pgx/v5",
		"sqlite":   "modernc.org/sqlite",
		"redis":    "github.com/redis/go-redis/v9",
	}
	for _, tc := range []struct {
		name, dir string // dir is the module to list in, from this package
		pkgs      []string
		driver    string
	}{
		{"generated code on PostgreSQL", "../../testdata/golden", []string{"./store-postgres/want/api", "github.com/idemgen/idemgen/runtime/pgstore"}, "postgres"},
		{"generated code on SQLite", "../../testdata/golden", []string{"./store-sqlite/want/api", "github.com/idemgen/idemgen/runtime/sqlitestore"}, "sqlite"},
		{"the engine and the client alone", ".", []string{"github.com/idemgen/idemgen/runtime/idem", "github.com/idemgen/idemgen/runtime/idemclient", "github.com/idemgen/idemgen/runtime/memstore"}, ""},
		{"redisstore", ".", []string{"github.com/idemgen/idemgen/runtime/redisstore"}, "redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mods := listModules(t, tc.dir, tc.pkgs)
			forbidden := slices.Clone(notBuilt)
			for name, mod := range drivers {
				if name != tc.driver {
					forbidden = append(forbidden, mod)
				}
			}
			for _, m := range forbidden {
				if slices.Contains(mods, m) {
					t.Errorf("%s builds packages of %s", strings.Join(tc.pkgs, " "), m)
				}
			}
			if want := drivers[tc.driver]; want != "" && !slices.Contains(mods, want) {
				t.Errorf("%s does not build %s: the check lists the wrong packages (modules: %q)", strings.Join(tc.pkgs, " "), want, mods)
			}
		})
	}
}

// listModules returns the modules whose packages pkgs build, listed in dir.
func listModules(t *testing.T, dir string, pkgs []string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Clean(dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var mods []string
	for _, m := range strings.Fields(string(out)) {
		if !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	return mods
}
