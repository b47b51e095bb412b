package headerwire

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	for _, h := range []http.Header{
		nil,
		{},
		{"X-Empty": {""}, "X-None": {}},
		{"X-Bytes": {"a\x00b", "\xff\xfe", "\xc3\x28", "é"}, "Content-Type": {"text/plain"}},
		{"X-Many": {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}},
	} {
		enc := Encode(h)
		got, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", h, err)
		}
		if diff := cmp.Diff(h, got); diff != "" {
			t.Errorf("round trip of %q (-want +got):\n%s", h, diff)
		}
		if !bytes.Equal(enc, Encode(got)) {
			t.Errorf("encoding of %q is not stable", h)
		}
	}
}

func TestDecodeRefusesMalformed(t *testing.T) {
	good := Encode(http.Header{"A": {"bc"}})
	for _, src := range [][]byte{
		{2},                    // unknown version
		{1},                    // no count
		{1, 0xff},              // truncated varint
		{1, 5, 1, 'A'},         // more names than bytes
		good[:len(good)-1],     // truncated value
		append(good, 0),        // trailing bytes
		{1, 1, 1, 'A', 1, 100}, // value longer than the rest
	} {
		if _, err := Decode(src); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%x) = %v, want ErrMalformed", src, err)
		}
	}
}
