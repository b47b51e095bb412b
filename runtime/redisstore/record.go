package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// readClaim turns claimScript's reply into a Result. Go strings carry any
// bytes, so the fingerprint, headers and body arrive exactly as stored.
func readClaim(v []any) (idem.Result, error) {
	if len(v) == 0 {
		return idem.Result{}, errors.New("empty reply")
	}
	switch v[0] {
	case "won":
		return idem.Result{Won: true}, nil
	case "took_over":
		return idem.Result{Won: true, TookOver: true}, nil
	case "lost":
	default:
		return idem.Result{}, fmt.Errorf("unexpected reply %q", v[0])
	}
	if len(v) < 5 {
		return idem.Result{}, fmt.Errorf("lost reply has %d fields, want at least 5", len(v))
	}
	f := make([]string, len(v))
	for i, x := range v {
		switch x := x.(type) {
		case string:
			f[i] = x
		case nil:
			// A field the record does not have.
		default:
			return idem.Result{}, fmt.Errorf("reply field %d is a %T", i, x)
		}
	}
	rec := idem.Record{State: idem.State(f[1]), Operation: f[2], Fingerprint: []byte(f[3])}
	left, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return idem.Result{}, fmt.Errorf("lease remaining %q: %w", f[4], err)
	}
	rec.LeaseRemaining = time.Duration(left) * time.Microsecond
	if rec.State == idem.StateCompleted {
		if len(v) < 9 {
			return idem.Result{}, fmt.Errorf("completed reply has %d fields, want 9", len(v))
		}
		resp, err := readResponse(f[5], f[6], f[7], f[8])
		if err != nil {
			return idem.Result{}, err
		}
		rec.Response = resp
	}
	return idem.Result{Existing: rec}, nil
}

func readResponse(status, headers, body, omitted string) (*idem.Response, error) {
	code, err := strconv.Atoi(status)
	if err != nil {
		return nil, fmt.Errorf("stored status %q: %w", status, err)
	}
	h, err := decodeHeaders(headers)
	if err != nil {
		return nil, fmt.Errorf("stored headers: %w", err)
	}
	resp := &idem.Response{Status: code, Header: h, Omitted: omitted == "1"}
	if body != "" {
		resp.Body = []byte(body)
	}
	return resp, nil
}

// The stored headers are a binary encoding, not JSON: a header value a
// handler writes may hold any bytes (invalid UTF-8 among them), and JSON
// would replace those. "" is a nil http.Header; otherwise headerVersion
// follows, then for each name in sorted order its length, the name, the
// number of values, and each value with its length (uvarints).
const headerVersion = 1

func encodeHeaders(h http.Header) []byte {
	if h == nil {
		return nil
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	// Sorted, so that one response always encodes to the same bytes.
	slices.Sort(names)
	b := []byte{headerVersion}
	for _, name := range names {
		b = appendString(b, name)
		b = binary.AppendUvarint(b, uint64(len(h[name])))
		for _, v := range h[name] {
			b = appendString(b, v)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errBadHeaders = errors.New("malformed header encoding")

func decodeHeaders(src string) (http.Header, error) {
	if src == "" {
		return nil, nil
	}
	if src[0] != headerVersion {
		return nil, fmt.Errorf("%w: unknown version %d", errBadHeaders, src[0])
	}
	d := headerDecoder{s: src[1:]}
	h := make(http.Header)
	for d.s != "" {
		name := d.str()
		n := d.uvarint()
		// Each value takes at least one byte, so a count beyond what is
		// left is corrupt; checking first keeps a bad count from
		// allocating.
		if d.err == nil && n > uint64(len(d.s)) {
			d.err = errBadHeaders
		}
		if d.err != nil {
			return nil, d.err
		}
		var vals []string
		if n > 0 {
			vals = make([]string, n)
		}
		for i := range vals {
			vals[i] = d.str()
		}
		if d.err != nil {
			return nil, d.err
		}
		h[name] = vals
	}
	return h, nil
}

type headerDecoder struct {
	s   string
	err error
}

func (d *headerDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	n, k := binary.Uvarint([]byte(d.s[:min(len(d.s), binary.MaxVarintLen64)]))
	if k <= 0 {
		d.err = errBadHeaders
		return 0
	}
	d.s = d.s[k:]
	return n
}

func (d *headerDecoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.s)) {
		d.err = errBadHeaders
		return ""
	}
	v := d.s[:n]
	d.s = d.s[n:]
	return v
}
