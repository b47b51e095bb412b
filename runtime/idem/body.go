package idem

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/problem"
)

// readInput reads the body (readBody) and what the fingerprint is computed
// over. The body is read as the media type the operation declares; a body
// of another kind is refused before the key is even looked for in it.
func (e *Engine) readInput(r *http.Request, op *operation, params map[string]string, query url.Values) (fingerprint.Input, Problem, bool) {
	body, p, ok := e.readBody(r, op)
	if !ok {
		return fingerprint.Input{}, p, false
	}
	mediaType, err := op.fingerprint.BodyMediaType(mediaTypeOf(r.Header.Get("Content-Type")), len(body) > 0)
	if err != nil {
		return fingerprint.Input{}, e.bodyProblem(op, err), false
	}
	return fingerprint.Input{MediaType: mediaType, Body: body, Path: params, Query: query}, Problem{}, true
}

// readBody reads the body once, within the limit, and hands the handler an
// intact copy, which still offers the value a validator in front checked
// (validated). It stops reading once the request's context is done.
func (e *Engine) readBody(r *http.Request, op *operation) ([]byte, Problem, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		if formParsed(r) {
			return e.parsedForm(r, op)
		}
		return nil, Problem{}, true
	}
	body, err := readLimited(r.Context(), r.Body, e.maxBody, r.ContentLength)
	_ = r.Body.Close()
	if err != nil {
		return nil, e.answer(problem.BodyUnread), false
	}
	if int64(len(body)) > e.maxBody {
		return nil, e.answer(problem.BodyTooBig, e.maxBody), false
	}
	if len(body) == 0 && formParsed(r) {
		return e.parsedForm(r, op)
	}
	r.Body = copyOf(r.Body, body)
	r.ContentLength = int64(len(body))
	return body, Problem{}, true
}

// formParsed reports whether middleware in front of the engine parsed the
// request's form from its body (r.ParseForm, r.FormValue,
// r.ParseMultipartForm), which leaves the body drained and the form on the
// request, where the handler reads it: net/http never parses a form twice.
// A parse that read no body (a JSON request, a DELETE) leaves r.PostForm
// empty and the body intact.
func formParsed(r *http.Request) bool {
	return len(r.PostForm) > 0 || r.MultipartForm != nil
}

// parsedForm is the body of a request whose form was parsed in front of
// the engine (formParsed): the handler reads that form, so an empty body
// is never fingerprinted in its place. A form body
// (application/x-www-form-urlencoded) is the parsed form encoded again,
// which the fingerprint reads as it reads the body the client sent (the
// order of distinct names does not count, a name's values keep theirs);
// the handler is given it as its body too. A multipart form, or a form on
// a request of another media type, cannot be read back as its body: the
// request is refused with 500 request-body-read-in-front, logged at ERROR,
// and its handler does not run.
func (e *Engine) parsedForm(r *http.Request, op *operation) ([]byte, Problem, bool) {
	if r.MultipartForm != nil || mediaTypeOf(r.Header.Get("Content-Type")) != formMediaType {
		e.log.ErrorContext(r.Context(), "request body read before the idempotency engine; the request was refused and its handler not run",
			"operation", op.OperationID, "method", r.Method, "path", r.URL.EscapedPath())
		return nil, e.answer(problem.BodyTaken), false
	}
	body := []byte(r.PostForm.Encode())
	if int64(len(body)) > e.maxBody {
		return nil, e.answer(problem.BodyTooBig, e.maxBody), false
	}
	c := &bodyCopy{}
	c.Reset(body)
	r.Body, r.ContentLength = c, int64(len(body))
	return body, Problem{}, true
}

// formMediaType is the media type of a form body.
const formMediaType = "application/x-www-form-urlencoded"

// firstRead bounds the buffer a body is first read into when its request
// declares its length: a client cannot make the engine allocate more than
// this up front by declaring a length it never sends.
const firstRead = 16 << 10

// readLimited reads src to its end, or to one byte past limit, and fails
// once ctx is done: a client that hung up mid-body is not waited for. A
// body of declared length (hint, -1 when unknown) is read into one buffer
// of its size, where io.ReadAll would start small and grow.
func readLimited(ctx context.Context, src io.Reader, limit, hint int64) ([]byte, error) {
	size := int64(512)
	if hint >= 0 {
		// One byte more than the body, so that the read that meets its
		// end needs no room to grow into.
		size = min(hint+1, limit+1, firstRead)
	}
	b := make([]byte, 0, size)
	for int64(len(b)) <= limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := b[len(b):cap(b)]
		if left := limit + 1 - int64(len(b)); int64(len(room)) > left {
			room = room[:left]
		}
		n, err := src.Read(room)
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// bodyCopy is the body the handler reads: the bytes the engine read, in
// one allocation where io.NopCloser(bytes.NewReader(…)) takes two.
type bodyCopy struct{ bytes.Reader }

// Close does nothing: the body is in memory.
func (*bodyCopy) Close() error { return nil }

// copyOf is the copy of body, read from src, that the handler reads.
func copyOf(src io.ReadCloser, body []byte) io.ReadCloser {
	if v, ok := src.(validated); ok {
		c := &validatedCopy{value: v.ValidatedValue()}
		c.Reset(body)
		return c
	}
	c := &bodyCopy{}
	c.Reset(body)
	return c
}

// validated is a body a request validator left the value it checked on
// (kin-openapi's openapi3filter with KeepValidatedValue). oapi-codegen's
// strict servers bind that value, matching member names exactly, where
// they would decode the body again without regard to case, and a member
// the validator never checked ("NOTE" for "note") would reach the method.
type validated interface{ ValidatedValue() any }

// validatedCopy is the copy of a validated body: the handler behind the
// engine is given the value the validator checked, as it would be without
// the engine. The engine read the same bytes the validator did.
type validatedCopy struct {
	bodyCopy
	value any
}

// ValidatedValue is the value the validator in front of the engine
// checked.
func (b *validatedCopy) ValidatedValue() any { return b.value }

// bodyProblem answers a body the engine cannot read: 415 for a media type
// it cannot fingerprint, 400 for a malformed body. Neither claims the key.
func (e *Engine) bodyProblem(op *operation, err error) Problem {
	if errors.Is(err, fingerprint.ErrMediaType) {
		takes := "application/json or application/x-www-form-urlencoded"
		if op.Fingerprint.MediaType != "" {
			takes = op.Fingerprint.MediaType
		}
		return e.answer(problem.MediaTypeUnsupported, takes)
	}
	why := strings.TrimPrefix(err.Error(), fingerprint.ErrBody.Error()+": ")
	return e.answer(problem.BodyMalformed, why)
}

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
