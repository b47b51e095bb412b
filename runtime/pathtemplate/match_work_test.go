//go:build idemwork

package pathtemplate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/work"
	"github.com/idemgen/idemgen/runtime/internal/worktest"
)

// A request path is the client's to choose, up to what the server reads of
// a request line: net/http counts it in Server.MaxHeaderBytes, 1 MiB by
// default (http.DefaultMaxHeaderBytes). Matching it against a template
// must cost work that grows with its length and with nothing else the
// client controls. These tests count that work (bytes split, decoded,
// searched and compared) on the worst paths we know how to build, and hold
// the work per path byte flat from 1 KiB to 1 MiB.

// hostilePath is a template and a way to build a path of a given length
// that its matching reads to the end.
type hostilePath struct {
	name     string
	template string
	build    func(size int) string
}

// fill repeats unit after prefix until the path holds about size bytes,
// then adds suffix.
func fill(prefix, unit, suffix string, size int) string {
	n := max((size-len(prefix)-len(suffix))/len(unit), 1)
	return prefix + strings.Repeat(unit, n) + suffix
}

var hostilePaths = []hostilePath{
	{"one parameter, percent-encoded throughout", "/pets/{id}", func(size int) string {
		return fill("/pets/", "%41", "", size)
	}},
	{"a literal spelled in escapes", "/pets/{id}/adopt", func(size int) string {
		return fill("/pets/x/", "%61", "", size)
	}},
	{"many segments", "/pets/{id}", func(size int) string {
		return fill("/pets", "/x", "", size)
	}},
	{"a mixed segment with its literal everywhere", "/files/{name}.json", func(size int) string {
		return fill("/files/", ".", "json", size)
	}},
	{"a mixed segment of many parts, its literals repeated", "/ops/{a}-{b}-{c}:cancel", func(size int) string {
		return fill("/ops/", "-:", "cancel", size)
	}},
	{"a mixed segment whose literal never closes it", "/ops/{a}-{b}:cancel", func(size int) string {
		return fill("/ops/", "-:cance", "", size)
	}},
	{"many long parameters", manyParams(64), func(size int) string {
		return strings.Repeat("/"+strings.Repeat("%7E", max(size/64/3, 1)), 64)
	}},
}

// manyParams is a template of n segments, each a parameter.
func manyParams(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "/{p%d}", i)
	}
	return b.String()
}

// matchWork returns the work of splitting path and matching it against t
// both ways (Match, then MatchAnySplit, as the engine does for a path
// Match turns away).
func matchWork(t *Template, path string) int {
	segs, _ := Split(path)
	return len(path) + work.Count(func() {
		t.Match(segs)
		t.MatchAnySplit(segs)
	})
}

func TestMatchWorkIsLinear(t *testing.T) {
	for _, shape := range hostilePaths {
		t.Run(shape.name, func(t *testing.T) {
			tmpl, err := Parse(shape.template)
			if err != nil {
				t.Fatal(err)
			}
			worktest.FlatPerByte(t, 2, func(size int) (int, int) {
				path := shape.build(size)
				return matchWork(tmpl, path), len(path)
			})
		})
	}
}
