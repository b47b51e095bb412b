package pgstore

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

// decodeHeaders turns the stored headers column, a JSON object of string
// arrays, into an http.Header. A replay decodes it on every call, and
// encoding/json's reflection was the largest client-side cost of a replay,
// so the shape PostgreSQL prints for such an object is read directly. Any
// input outside that plain shape (an escape sequence, a null, invalid UTF-8,
// anything unexpected) goes to encoding/json, which stays the reference:
// the fast path accepts only what it decodes exactly as encoding/json would.
func decodeHeaders(src []byte) (http.Header, error) {
	if h, ok := decodeHeadersFast(src); ok {
		return h, nil
	}
	var h http.Header
	if err := json.Unmarshal(src, &h); err != nil {
		return nil, err
	}
	return h, nil
}

// decodeHeadersFast decodes src when every string in it is free of
// backslashes and control characters. All names and values share one
// string allocation, and all value slices one backing array (each capped,
// so that appending to one never overwrites the next).
func decodeHeadersFast(src []byte) (http.Header, bool) {
	if !utf8.Valid(src) {
		return nil, false
	}
	// One copy: src belongs to the driver's read buffer.
	p := headerParser{s: string(src)}
	if !p.consume('{') {
		return nil, false
	}
	h := make(http.Header, p.countNames())
	vals := make([]string, 0, p.countValues())
	if p.consume('}') {
		return h, p.end()
	}
	for {
		name, ok := p.str()
		if !ok || !p.consume(':') || !p.consume('[') {
			return nil, false
		}
		start := len(vals)
		if !p.consume(']') {
			for {
				v, ok := p.str()
				if !ok {
					return nil, false
				}
				vals = append(vals, v)
				if p.consume(']') {
					break
				}
				if !p.consume(',') {
					return nil, false
				}
			}
		}
		h[name] = vals[start:len(vals):len(vals)]
		if p.consume('}') {
			return h, p.end()
		}
		if !p.consume(',') {
			return nil, false
		}
	}
}

type headerParser struct {
	s string
	i int
}

func (p *headerParser) skipSpace() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// consume skips white space and then c, reporting whether c was there.
func (p *headerParser) consume(c byte) bool {
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string without escapes; a backslash or control character
// makes it refuse.
func (p *headerParser) str() (string, bool) {
	if !p.consume('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '"':
			v := p.s[start:p.i]
			p.i++
			return v, true
		case c == '\\' || c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// end reports whether only white space is left.
func (p *headerParser) end() bool {
	p.skipSpace()
	return p.i == len(p.s)
}

// countNames and countValues size the map and the value array from the
// colons and quotes ahead; they are upper bounds only used as capacities.
func (p *headerParser) countNames() int {
	n := 0
	for i := p.i; i < len(p.s); i++ {
		if p.s[i] == ':' {
			n++
		}
	}
	return n
}

func (p *headerParser) countValues() int {
	n := 0
	for i := p.i; i < len(p.s); i++ {
		if p.s[i] == '"' {
			n++
		}
	}
	return n / 2
}
