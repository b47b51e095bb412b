package idem

import "mime"

// mediaTypeOf is the media type of a Content-Type header value, as
// mime.ParseMediaType reads it: lower case, "" when ct is malformed. A bare
// type/subtype in lower case, what clients send for JSON, is its own media
// type; only another value pays for ParseMediaType's parse and the
// parameter map it builds.
func mediaTypeOf(ct string) string {
	if ct == "" || bareMediaType(ct) {
		return ct
	}
	mediaType, _, _ := mime.ParseMediaType(ct)
	return mediaType
}

// bareMediaType reports whether ct is type "/" subtype, each a non-empty
// token (RFC 9110 §5.6.2) with no upper-case letter, and nothing else.
func bareMediaType(ct string) bool {
	slash := -1
	for i := range len(ct) {
		switch c := ct[i]; {
		case c == '/' && slash < 0 && i > 0:
			slash = i
		case !lowerTokenChar(c):
			return false
		}
	}
	return slash > 0 && slash < len(ct)-1
}

// lowerTokenChar reports whether c may appear in a token and is not an
// upper-case letter.
func lowerTokenChar(c byte) bool {
	switch {
	case c <= ' ' || c >= 0x7f || ('A' <= c && c <= 'Z'):
		return false
	}
	switch c {
	case '(', ')', '<', '>', '@', ',', ';', ':', '\\', '"', '/', '[', ']', '?', '=':
		return false
	}
	return true
}
