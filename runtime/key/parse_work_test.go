//go:build idemwork

package key

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/work"
	"github.com/idemgen/idemgen/runtime/internal/worktest"
)

// A header key is read from a value the client chose, up to the 1 MiB of
// headers net/http reads (http.DefaultMaxHeaderBytes), before anything is
// claimed. Parse reads each byte a bounded number of times: this test
// counts the bytes it reads on the worst values we know how to build and
// holds the work per byte flat from 1 KiB to 1 MiB, whether the value is
// accepted (under a limit as long as itself) or refused.
func TestParseWorkIsLinear(t *testing.T) {
	for _, shape := range []struct {
		name  string
		build func(size int) string
	}{
		{"spaces around one character", func(size int) string {
			pad := strings.Repeat(" \t", size/4)
			return pad + "k" + pad
		}},
		{"a quoted key of escapes", func(size int) string {
			return `"` + strings.Repeat(`\"\\`, size/4) + `"`
		}},
		{"a quoted key of plain characters, then an escape", func(size int) string {
			return `"` + strings.Repeat("k", size-4) + `\""`
		}},
		{"a quoted key left open", func(size int) string {
			return `"` + strings.Repeat(`\\`, size/2)
		}},
		{"visible ASCII, a control character last", func(size int) string {
			return strings.Repeat("k", size-1) + "\x01"
		}},
		{"visible ASCII", func(size int) string {
			return strings.Repeat("k", size)
		}},
	} {
		t.Run(shape.name, func(t *testing.T) {
			worktest.FlatPerByte(t, 2, func(size int) (int, int) {
				value := shape.build(size)
				steps := work.Count(func() { _, _ = Parse(value, len(value)) })
				return steps, len(value)
			})
		})
	}
}
