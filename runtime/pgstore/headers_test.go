package pgstore

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// headerCases are inputs for decodeHeaders; fast says whether the fast path
// must accept them.
var headerCases = []struct {
	in   string
	fast bool
}{
	// As PostgreSQL prints a jsonb object: shorter keys first, ", " and ": ".
	{`{"Location": ["/transfers/tr_1"], "Content-Type": ["application/json"]}`, true},
	{`{}`, true},
	{` { } `, true},
	{`{"A":[]}`, true},
	{`{"Set-Cookie": ["a=1; Path=/", "b=2"], "X": ["", "ü ✓"]}`, true},
	{"{\n\t\"A\" :\r[ \"1\" , \"2\" ] }", true},
	{`{"A": ["1"], "A": ["2"]}`, true},
	{`{"Link": ["<https://example.com/a?b=c:d>; rel=\"next\""]}`, false},
	{`{"A": ["tab\there"]}`, false},
	{`{"A": ["\u00fc"]}`, false},
	{`{"A": null}`, false},
	{`null`, false},
	{`{"A": "x"}`, false},
	{`{"A": [1]}`, false},
	{`{"A": ["x"]`, false},
	{`{"A": ["x"]} x`, false},
	{`{"A" ["x"]}`, false},
	{`{"A": ["x",]}`, false},
	{`{"A": ["x"],}`, false},
	{"{\"A\": [\"\xff\"]}", false},
	{`[]`, false},
	{``, false},
}

func TestDecodeHeadersMatchesEncodingJSON(t *testing.T) {
	for _, c := range headerCases {
		_, ok := decodeHeadersFast([]byte(c.in))
		if ok != c.fast {
			t.Errorf("decodeHeadersFast(%q) accepted = %v, want %v", c.in, ok, c.fast)
		}
		checkHeaders(t, []byte(c.in))
	}
}

// checkHeaders compares decodeHeaders with encoding/json on src.
func checkHeaders(t *testing.T, src []byte) {
	t.Helper()
	got, gotErr := decodeHeaders(src)
	var want http.Header
	wantErr := json.Unmarshal(src, &want)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("decodeHeaders(%q) error = %v, encoding/json error = %v", src, gotErr, wantErr)
	}
	if wantErr != nil {
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("decodeHeaders(%q) differs from encoding/json (-want +got):\n%s", src, diff)
	}
	// cmp treats nil and empty alike only when told to; keep them apart.
	if (want == nil) != (got == nil) {
		t.Fatalf("decodeHeaders(%q) nil = %v, encoding/json nil = %v", src, got == nil, want == nil)
	}
	for k, v := range want {
		if (v == nil) != (got[k] == nil) {
			t.Fatalf("decodeHeaders(%q)[%q] nil = %v, encoding/json nil = %v", src, k, got[k] == nil, v == nil)
		}
	}
}

// The value slices share one backing array; appending to one must not
// change its neighbour.
func TestDecodeHeadersSlicesAreIndependent(t *testing.T) {
	h, ok := decodeHeadersFast([]byte(`{"A": ["1"], "B": ["2"]}`))
	if !ok {
		t.Fatal("fast path refused a plain object")
	}
	h["A"] = append(h["A"], "x")
	if got := h["B"]; len(got) != 1 || got[0] != "2" {
		t.Fatalf(`after appending to A, B = %q, want ["2"]`, got)
	}
}

// The decoded strings must not alias the input, which is the driver's
// reusable read buffer.
func TestDecodeHeadersCopiesInput(t *testing.T) {
	src := []byte(`{"A": ["1"]}`)
	h, err := decodeHeaders(src)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src {
		src[i] = 'z'
	}
	if got := h.Get("A"); got != "1" {
		t.Fatalf("after overwriting the input, A = %q, want 1", got)
	}
}

func FuzzDecodeHeaders(f *testing.F) {
	for _, c := range headerCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		checkHeaders(t, src)
	})
}

func BenchmarkDecodeHeaders(b *testing.B) {
	src := []byte(`{"Location": ["/transfers/tr_1"], "Content-Type": ["application/json"]}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeHeaders(src); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var h http.Header
			if err := json.Unmarshal(src, &h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
