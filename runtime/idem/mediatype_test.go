package idem

import (
	"mime"
	"testing"
)

// mediaTypeOf reads every Content-Type as mime.ParseMediaType does; its
// short cut for a bare type/subtype must never answer otherwise.
func FuzzMediaTypeOf(f *testing.F) {
	for _, ct := range []string{
		"", "application/json", "Application/JSON", "application/json; charset=utf-8",
		"application/json ", " application/json", "application/", "/json", "application",
		"application/json/x", "application/vnd.api+json", "text/plain;", "a/b=c", "a/b\x7f",
		"application/merge-patch+json", "multipart/form-data; boundary=x", "a//b", "a/b\"",
	} {
		f.Add(ct)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		want, _, _ := mime.ParseMediaType(ct)
		if got := mediaTypeOf(ct); got != want {
			t.Errorf("mediaTypeOf(%q) = %q, mime.ParseMediaType says %q", ct, got, want)
		}
	})
}

// The media type JSON clients send costs no allocation to read.
func TestMediaTypeOfBareAllocatesNothing(t *testing.T) {
	for _, ct := range []string{"application/json", "application/x-www-form-urlencoded", "application/vnd.api+json"} {
		if n := testing.AllocsPerRun(100, func() { _ = mediaTypeOf(ct) }); n != 0 {
			t.Errorf("mediaTypeOf(%q): %.0f allocations, want none", ct, n)
		}
	}
}

// Every string of up to five bytes from an alphabet of the characters
// the short cut decides on reads as mime.ParseMediaType reads it.
func TestMediaTypeOfShortStrings(t *testing.T) {
	const alphabet = "aZ/ ;=\"+.\x7f\xc3"
	var walk func(prefix []byte)
	walk = func(prefix []byte) {
		ct := string(prefix)
		want, _, _ := mime.ParseMediaType(ct)
		if got := mediaTypeOf(ct); got != want {
			t.Fatalf("mediaTypeOf(%q) = %q, mime.ParseMediaType says %q", ct, got, want)
		}
		if len(prefix) == 5 {
			return
		}
		for i := range len(alphabet) {
			walk(append(prefix, alphabet[i]))
		}
	}
	walk(make([]byte, 0, 5))
}
