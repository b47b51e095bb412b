//go:build idemwork

package idem

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/work"
	"github.com/idemgen/idemgen/runtime/internal/worktest"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// Finding the operation of a request reads a path the client chose, up to
// the 1 MiB that net/http reads of a request line (Server.MaxHeaderBytes,
// http.DefaultMaxHeaderBytes). The router tries every template of the
// request's method, and the normalized readings of the path when none
// matches, so its work per path byte may grow with the number of
// templates, which is the engine's, and with nothing the client controls.
// This test counts it (internal/work) on paths built to defeat each
// shortcut, against many templates that share long prefixes, from 1 KiB
// to 1 MiB.

// sharedPrefixRouter is a router under "/api" with 24 POST templates that
// share their first segments and differ only at the end.
func sharedPrefixRouter(t *testing.T) router {
	t.Helper()
	rt, err := newRouter("/api")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range 8 {
		paths = append(paths,
			fmt.Sprintf("/v1/accounts/{account}/transfers/{id}/op%02d", i),
			fmt.Sprintf("/v1/accounts/{account}/transfers/{id}:op%02d", i),
			fmt.Sprintf("/v1/accounts/{account}/transfers/{id}.op%02d", i))
	}
	for i, p := range paths {
		tmpl, err := pathtemplate.Parse(p)
		if err != nil {
			t.Fatal(err)
		}
		op := &operation{Policy: Policy{Method: "POST", Path: p, OperationID: fmt.Sprint("op", i)}, template: tmpl}
		if err := rt.add(op); err != nil {
			t.Fatal(err)
		}
	}
	return rt
}

// repeat fills the middle of a path with unit until it holds about size
// bytes.
func repeat(prefix, unit, suffix string, size int) string {
	n := max((size-len(prefix)-len(suffix))/len(unit), 1)
	return prefix + strings.Repeat(unit, n) + suffix
}

var hostileRoutePaths = []struct {
	name  string
	build func(size int) string
}{
	{"long escaped parameters that no template ends", func(size int) string {
		return repeat("/api/v1/accounts/", "%41", "/transfers/x/nope", size)
	}},
	{"the last template's path, its parameters long", func(size int) string {
		return repeat("/api/v1/accounts/", "a", "/transfers/x.op07", size)
	}},
	{"a mixed segment's literal repeated throughout", func(size int) string {
		return repeat("/api/v1/accounts/a/transfers/", ":op", "00", size)
	}},
	{"many empty segments", func(size int) string {
		return repeat("/api/v1/accounts/a/transfers/x", "/", "op00", size)
	}},
	{"many dot segments", func(size int) string {
		return repeat("/api/v1/accounts/a/transfers/x", "/./..", "/op00", size)
	}},
	{"needed escapes everywhere, a needless one last", func(size int) string {
		return repeat("/api/v1/accounts/", "%2F%20%25", "%61/transfers/x/op00", size)
	}},
	{"lower-case escapes everywhere", func(size int) string {
		return repeat("/api/v1/accounts/", "%2f%3a", "/transfers/x/op00", size)
	}},
	{"many segments", func(size int) string {
		return repeat("/api/v1", "/x", "", size)
	}},
}

func TestRouteWorkIsLinear(t *testing.T) {
	rt := sharedPrefixRouter(t)
	for _, shape := range hostileRoutePaths {
		t.Run(shape.name, func(t *testing.T) {
			worktest.FlatPerByte(t, 2, func(size int) (int, int) {
				path := shape.build(size)
				var r route
				steps := work.Count(func() { r = rt.find("POST", path) })
				t.Logf("operation found: %v, near: %v", r.op != nil, r.near)
				return steps, len(path)
			})
		})
	}
}
