// Package headerwire is the byte encoding in which the SQL stores keep a
// stored response's headers. A header value can hold any byte net/http lets
// a handler write (NUL, bytes that are not UTF-8, empty values); JSON text
// cannot carry all of them unchanged (PostgreSQL's jsonb refuses NUL, and
// encoding/json rewrites invalid UTF-8 to U+FFFD), so the headers travel as
// length-prefixed bytes in a bytea or BLOB column and replay byte for byte.
//
// The encoding is a version byte (1), the number of names, then for each
// name in sorted order: its length and bytes, the number of its values, and
// each value's length and bytes. Every number is an unsigned varint. The
// names are sorted so that one header always encodes to the same bytes.
package headerwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/work"
)

const version = 1

// ErrMalformed reports stored header bytes that are not this encoding.
var ErrMalformed = errors.New("headerwire: malformed header encoding")

// Encode returns h's encoding, or nil for a nil h (no headers were kept).
// It counts its work (internal/work), the names compared in sorting and
// the bytes written, so that tests can hold it to the encoding's size.
func Encode(h http.Header) []byte {
	if h == nil {
		return nil
	}
	names := make([]string, 0, len(h))
	size := 1 + binary.MaxVarintLen64
	for name, values := range h {
		names = append(names, name)
		size += 2*binary.MaxVarintLen64 + len(name)
		for _, v := range values {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		work.Add(1)
		return strings.Compare(a, b)
	})
	b := make([]byte, 0, size)
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		values := h[name]
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = appendString(b, v)
		}
	}
	work.Add(len(b))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode turns an encoding back into the header it came from; nil or empty
// src is a nil header. The result shares no memory with src: names and
// values share one string copied from it, and the value lists one backing
// array (each capped, so appending to one never overwrites the next).
//
// It counts its work (internal/work), the bytes read and the names and
// values stored, so that tests can hold it to src's size.
func Decode(src []byte) (http.Header, error) {
	if len(src) == 0 {
		return nil, nil
	}
	if src[0] != version {
		return nil, fmt.Errorf("%w: version %d", ErrMalformed, src[0])
	}
	d := decoder{s: string(src[1:])}
	n := d.count()
	h := make(http.Header, min(n, len(d.s)))
	// Each value takes at least one byte, so the rest bounds their number.
	vals := make([]string, 0, min(len(d.s), 64))
	for range n {
		name := d.str()
		count := d.count()
		start := len(vals)
		for range count {
			work.Add(1)
			vals = append(vals, d.str())
			if d.err != nil {
				break
			}
		}
		if d.err != nil {
			break
		}
		work.Add(1)
		h[name] = vals[start:len(vals):len(vals)]
	}
	if d.err == nil && d.i != len(d.s) {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d.s)-d.i)
	}
	work.Add(d.i)
	if d.err != nil {
		return nil, d.err
	}
	return h, nil
}

type decoder struct {
	s   string
	i   int // bytes read, each once
	err error
}

// count reads a varint that counts things each at least one byte long, so
// a count beyond the bytes left is malformed rather than an allocation.
func (d *decoder) count() int {
	if d.err != nil {
		return 0
	}
	v, n := uvarint(d.s[d.i:])
	if n <= 0 || v > uint64(len(d.s)-d.i-n) {
		d.err = fmt.Errorf("%w: bad count at byte %d", ErrMalformed, d.i+1)
		return 0
	}
	d.i += n
	return int(v)
}

func (d *decoder) str() string {
	if d.err != nil {
		return ""
	}
	v, n := uvarint(d.s[d.i:])
	if n <= 0 || v > uint64(len(d.s)-d.i-n) {
		d.err = fmt.Errorf("%w: bad length at byte %d", ErrMalformed, d.i+1)
		return ""
	}
	start := d.i + n
	d.i = start + int(v)
	return d.s[start:d.i]
}

// uvarint is binary.Uvarint on a string, which reads the bytes in place.
func uvarint(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -(i + 1)
			}
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0
}
