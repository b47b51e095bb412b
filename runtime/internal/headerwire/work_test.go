//go:build idemwork

package headerwire

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/work"
	"github.com/idemgen/idemgen/runtime/internal/worktest"
)

// A stored response's headers are encoded when it is captured and decoded
// on every replay; a handler may echo into them what a client sent, up to
// the 1 MiB of headers net/http reads (http.DefaultMaxHeaderBytes). The
// work of both must grow with the headers' size and nothing else: these
// tests count it (names compared, bytes written and read) and hold it flat
// per byte from 1 KiB to 1 MiB.

var hostileHeaders = []struct {
	name  string
	build func(size int) http.Header
}{
	{"many names, in reverse order", func(size int) http.Header {
		h := http.Header{}
		for i := size / 16; i > 0; i-- {
			h[fmt.Sprintf("X-H%09d", i)] = []string{"v"}
		}
		return h
	}},
	{"many names sharing a long prefix", func(size int) http.Header {
		h := http.Header{}
		prefix := "X-" + strings.Repeat("p", 64)
		for i := range size / 80 {
			h[fmt.Sprintf("%s%09d", prefix, i)] = []string{""}
		}
		return h
	}},
	{"one name, many values", func(size int) http.Header {
		return http.Header{"X-V": make([]string, size/2)}
	}},
	{"one long value", func(size int) http.Header {
		return http.Header{"X-V": {strings.Repeat("\x00\xff", size/2)}}
	}},
}

func TestEncodingWorkIsLinear(t *testing.T) {
	for _, shape := range hostileHeaders {
		t.Run(shape.name, func(t *testing.T) {
			worktest.FlatPerByte(t, 2, func(size int) (int, int) {
				h := shape.build(size)
				var enc []byte
				var err error
				steps := work.Count(func() {
					enc = Encode(h)
					_, err = Decode(enc)
				})
				if err != nil {
					t.Fatal(err)
				}
				return steps, len(enc)
			})
		})
	}
}
