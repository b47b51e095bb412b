package key

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"unicode"
	"unicode/utf8"

	"github.com/idemgen/idemgen/internal/work"
	"github.com/idemgen/idemgen/runtime/fingerprint"
)

// MaxLength is the longest key any policy may allow, in characters: a
// policy's keyMaxLength is from 1 to MaxLength, and MaxLength is its
// default. The engine, the generator and the client all read it here. A
// header or query key is ASCII, one byte a character; a body key counts
// Unicode code points, so it may take up to 4·MaxLength bytes.
const MaxLength = 255

// ErrInvalid is wrapped by every error about a key that is present but
// unusable: the request is answered 400 invalid-idempotency-key.
var ErrInvalid = errors.New("invalid idempotency key")

// The ways a key can be invalid. Each wraps ErrInvalid.
var (
	// ErrEmpty: the key has no characters.
	ErrEmpty = fmt.Errorf("%w: empty", ErrInvalid)
	// ErrTooLong: the key is longer than the operation allows.
	ErrTooLong = fmt.Errorf("%w: too long", ErrInvalid)
	// ErrBadChar: a header or query key has a character outside visible
	// ASCII, or a body key a control or space character.
	ErrBadChar = fmt.Errorf("%w: bad character", ErrInvalid)
	// ErrMalformed: a quoted key is not a well-formed structured-field
	// string.
	ErrMalformed = fmt.Errorf("%w: malformed string", ErrInvalid)
	// ErrRepeated: the key is given more than once.
	ErrRepeated = fmt.Errorf("%w: repeated", ErrInvalid)
	// ErrNotString: a body key is not a JSON string.
	ErrNotString = fmt.Errorf("%w: not a string", ErrInvalid)
)

// Error is an invalid key. Its message is written for the API client (it
// suits a problem's detail) and never repeats the key itself, which may
// hold control characters.
type Error struct {
	// Kind is one of ErrEmpty, ErrTooLong, ErrBadChar, ErrMalformed,
	// ErrRepeated or ErrNotString.
	Kind error
	// Detail says what is wrong and what to send instead.
	Detail string
}

// Error returns the detail, which is safe to show a client.
func (e *Error) Error() string { return e.Detail }

// Unwrap returns the kind, so errors.Is matches it and ErrInvalid.
func (e *Error) Unwrap() error { return e.Kind }

func invalid(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Parse reads a key from a header value. A value that starts with '"' is an
// RFC 8941 structured-field string, so "abc" (quotes included) and abc name
// the same key; inside the quotes only \" and \\ are escapes. Any other value
// is the key itself. Surrounding spaces and tabs are ignored. The key must be
// 1 to maxLen characters of visible ASCII (0x21 to 0x7E).
func Parse(value string, maxLen int) (string, error) {
	v := trimOWS(value)
	if len(v) > 0 && v[0] == '"' {
		k, err := unquote(v)
		if err != nil {
			return "", err
		}
		v = k
	}
	if err := check(v, maxLen); err != nil {
		return "", err
	}
	return v, nil
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		work.Add(1)
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		work.Add(1)
		s = s[:len(s)-1]
	}
	return s
}

// unquote decodes the structured-field string s, which starts with '"'.
func unquote(s string) (string, error) {
	var b []byte // allocated only when an escape makes the key differ from s
	for i := 1; i < len(s); i++ {
		work.Add(1)
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", invalid(ErrMalformed, `the quoted idempotency key has a backslash at position %d that is not followed by " or \; only \" and \\ are escapes`, i+1)
			}
			if b == nil {
				b = append(make([]byte, 0, len(s)), s[1:i]...)
			}
			b = append(b, s[i+1])
			i++
		case c == '"':
			if i != len(s)-1 {
				return "", invalid(ErrMalformed, "the quoted idempotency key has characters after its closing quote at position %d", i+1)
			}
			if b == nil {
				return s[1:i], nil
			}
			return string(b), nil
		case c < 0x20 || c > 0x7e:
			return "", badChar(c, i+1)
		default:
			if b != nil {
				b = append(b, c)
			}
		}
	}
	return "", invalid(ErrMalformed, "the quoted idempotency key has no closing quote")
}

func badChar(c byte, pos int) error {
	return invalid(ErrBadChar, "the idempotency key has a character outside visible ASCII (byte 0x%02x at position %d); use only the characters 0x21 to 0x7E, such as a UUID", c, pos)
}

// Check applies the rule of docs/semantics.md §2 for a header or query key to
// k: 1 to maxLen bytes of visible ASCII. The error is the one a request with
// k would be refused with, so that a client can refuse it before sending.
func Check(k string, maxLen int) error { return check(k, maxLen) }

func check(k string, maxLen int) error {
	if k == "" {
		return invalid(ErrEmpty, "the idempotency key is empty; send 1 to %d visible ASCII characters, such as a UUID", maxLen)
	}
	for i := 0; i < len(k); i++ {
		work.Add(1)
		if c := k[i]; c < 0x21 || c > 0x7e {
			return badChar(c, i+1)
		}
	}
	if len(k) > maxLen {
		return invalid(ErrTooLong, "the idempotency key is %d characters long; the limit is %d", len(k), maxLen)
	}
	return nil
}

// FromHeader reads the key from the header name. present is false when the
// request has no such header. A header sent more than once is invalid: a
// client that sends two keys has no single identity for its request.
func FromHeader(h http.Header, name string, maxLen int) (k string, present bool, err error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		k, err := Parse(vs[0], maxLen)
		return k, true, err
	default:
		return "", true, invalid(ErrRepeated, "the %s header appears %d times; send it once", http.CanonicalHeaderKey(name), len(vs))
	}
}

// FromQuery reads the key from the query parameter name. Its value is
// taken literally (no quoted-string form) and must appear once.
func FromQuery(q url.Values, name string, maxLen int) (string, bool, error) {
	vs, ok := q[name]
	switch {
	case !ok:
		return "", false, nil
	case len(vs) > 1:
		return "", true, invalid(ErrRepeated, "the query parameter %s appears %d times; send it once", name, len(vs))
	}
	if err := check(vs[0], maxLen); err != nil {
		return "", true, err
	}
	return vs[0], true, nil
}

// FromBody reads the key from the request body at the JSON Pointer pointer.
// For application/json (and +json types) the member must be a JSON string;
// for application/x-www-form-urlencoded the pointer "/idempotency_key"
// names the field idempotency_key and "/a/b" the field a[b], which must
// appear once. An empty body or a missing member is present=false. A body
// that cannot be parsed, or whose key member encoding/json would read
// otherwise (see fingerprint.Lookup), returns an error wrapping
// fingerprint.ErrBody (or fingerprint.ErrMediaType), not ErrInvalid: the
// body is at fault, not the key.
func FromBody(body []byte, mediaType, pointer string, maxLen int) (string, bool, error) {
	v, found, err := fingerprint.Lookup(mediaType, body, pointer)
	if err != nil {
		return "", false, fmt.Errorf("reading the idempotency key at %s: %w", pointer, err)
	}
	return FromBodyValue(v, found, pointer, maxLen)
}

// FromBodyValue is FromBody for a body already parsed: v and found are what
// fingerprint.Lookup (or fingerprint.Compiled.SumLookup) returned for
// pointer.
func FromBodyValue(v []byte, found bool, pointer string, maxLen int) (string, bool, error) {
	if !found {
		return "", false, nil
	}
	k, ok := jsonString(v)
	if !ok {
		return "", true, invalid(ErrNotString, "the idempotency key at %s in the body must be a single string", pointer)
	}
	if err := CheckBody(k, maxLen); err != nil {
		return "", true, err
	}
	return k, true, nil
}

// CheckBody applies the rule of docs/semantics.md §2 for a key carried in a
// JSON body member or a form field to k: 1 to maxLen characters (Unicode
// code points, as a JSON Schema maxLength counts them) of valid UTF-8, none
// of them a control character or white space. The visible-ASCII rule of
// Check belongs to header and query keys; a JSON string or a form field
// carries any text, so a key there may be any identifier a schema allows,
// "clé-paiement-1" included. A key is an identifier, not prose: like a
// header key it holds no space, which also keeps it apart from the stored
// form of a key under a secret ("hmac " and hex digits). The error is the
// one a request with k would be refused with.
func CheckBody(k string, maxLen int) error {
	if k == "" {
		return invalid(ErrEmpty, "the idempotency key is empty; send 1 to %d characters, such as a UUID", maxLen)
	}
	n := 0
	for i := 0; i < len(k); n++ {
		r, size := utf8.DecodeRuneInString(k[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return invalid(ErrBadChar, "the idempotency key is not valid UTF-8 (byte 0x%02x at byte %d)", k[i], i+1)
		case unicode.IsControl(r) || unicode.IsSpace(r):
			return invalid(ErrBadChar, "the idempotency key has a control or space character (U+%04X at character %d); send printable characters without spaces, such as a UUID", r, n+1)
		}
		i += size
	}
	if n > maxLen {
		return invalid(ErrTooLong, "the idempotency key is %d characters long; the limit is %d", n, maxLen)
	}
	return nil
}

// jsonString decodes the canonical JSON string v. Canonical strings escape
// only '"', '\\' and control characters (as \n or \u00XX), so that is all
// it needs to know; the control characters come out as themselves for
// CheckBody to reject.
func jsonString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	v = v[1 : len(v)-1]
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' || i+1 >= len(v) {
			b = append(b, v[i])
			continue
		}
		i++
		switch e := v[i]; e {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			var r byte
			for _, h := range v[i+1 : min(i+5, len(v))] {
				r = r<<4 | unhex(h)
			}
			b = append(b, r)
			i += 4
		default: // '"' or '\\'
			b = append(b, e)
		}
	}
	return string(b), true
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	default:
		return c - '0'
	}
}
