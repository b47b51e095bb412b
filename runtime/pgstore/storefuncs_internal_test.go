package pgstore

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The functions sameTxCheckSQL watches for a handler's replacement are
// the functions the migrations create: a function a later migration adds
// is watched too, or this fails.
func TestWatchedFunctionsAreTheMigrations(t *testing.T) {
	files, err := filepath.Glob("../../templates/sql/postgres*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no PostgreSQL migrations found: %v", err)
	}
	fn := regexp.MustCompile(`(?i)CREATE (?:OR REPLACE )?FUNCTION (\w+)`)
	created := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fn.FindAllStringSubmatch(string(b), -1) {
			created[strings.ToLower(m[1])] = true
		}
	}
	list := regexp.MustCompile(`'\{([a-z_,]+)\}'::pg_catalog\.name\[\]`).FindStringSubmatch(sameTxCheckSQL)
	if list == nil {
		t.Fatal("sameTxCheckSQL names no functions")
	}
	watched := map[string]bool{}
	for _, name := range strings.Split(list[1], ",") {
		watched[name] = true
		if !created[name] {
			t.Errorf("sameTxCheckSQL watches %s, which no migration creates", name)
		}
	}
	for name := range created {
		if !watched[name] {
			t.Errorf("the migrations create %s, which sameTxCheckSQL does not watch", name)
		}
	}
}
