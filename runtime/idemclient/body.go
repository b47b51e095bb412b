package idemclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemgen/idemgen/runtime/key"
)

// withBody returns a clone of proto under ctx with a fresh reader of body.
func withBody(ctx context.Context, proto *http.Request, body []byte) *http.Request {
	r := proto.Clone(ctx)
	if body == nil {
		r.Body = nil
		r.GetBody = nil
		return r
	}
	r.ContentLength = int64(len(body))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r
}

// readBody reads req's body, so each attempt can send it again, and closes
// it. A body longer than limit is left open after its first limit+1 bytes,
// which are returned with whole false. The caller's context bounds the
// reading: a body that streams and stalls (a pipe) is closed when the
// context ends, which is what unblocks its reader, and the call returns at
// once.
func readBody(ctx context.Context, req *http.Request, limit int64) (b []byte, whole bool, err error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true, nil
	}
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
		done <- read{b, err}
	}()
	select {
	case r := <-done:
		if r.err == nil && int64(len(r.b)) > limit {
			return r.b, false, nil
		}
		_ = req.Body.Close()
		if r.err != nil {
			return nil, false, fmt.Errorf("idemclient: read the request body: %w", r.err)
		}
		return r.b, true, nil
	case <-ctx.Done():
		_ = req.Body.Close()
		return nil, false, fmt.Errorf("idemclient: read the request body: %w", ctx.Err())
	}
}

// sendOnce sends a request whose body is too large to keep for a retry:
// once, the body streamed on from head, what was read of it. A header or
// query key is attached all the same, so that the server can tell a later
// call with the same key (WithKey) from a new request.
func (t *Transport) sendOnce(ctx context.Context, req *http.Request, op *Operation, want string, head []byte, rep *Report) (*http.Response, error) {
	r := req.Clone(ctx)
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), req.Body), req.Body}
	r.GetBody = nil
	rep.Attempts = 1
	if op == nil {
		setEffectHeader(r)
	}
	if op != nil {
		rep.Operation = op.ID
		if op.Key.In == key.InBody {
			rep.Key = headKey(req, head, op)
		} else {
			k, _, _, err := attachKey(r, nil, op, want)
			if err != nil {
				_ = req.Body.Close()
				return nil, err
			}
			rep.Key = k
		}
	}
	return t.cfg.Base.RoundTrip(r)
}

// headKey is the body key that a body too large to keep carries, as the
// caller wrote it, when head, the start of the body, holds it as a
// top-level member (JSON) or a whole pair (a form); "" otherwise, or when
// the server would refuse it. The request is sent with it all the same:
// the report names it, so that a replay of an earlier call with that key
// is reported as one.
func headKey(req *http.Request, head []byte, op *Operation) string {
	name, ok := topMember(op)
	if !ok {
		return ""
	}
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	var k string
	switch {
	case mt == "application/x-www-form-urlencoded":
		// The pairs before the last '&' are whole.
		i := bytes.LastIndexByte(head, '&')
		if i < 0 {
			return ""
		}
		vs, err := url.ParseQuery(string(head[:i]))
		if err != nil || len(vs[name]) != 1 {
			return ""
		}
		k = vs[name][0]
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		k, ok = jsonMember(head, name)
		if !ok {
			return ""
		}
	default:
		return ""
	}
	if checkKey(k, op.KeyMaxLength, key.InBody) != nil {
		return ""
	}
	return k
}

// jsonMember reads the string member name of the JSON object that head
// starts, as far as head goes.
func jsonMember(head []byte, name string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		if t == name {
			var v string
			err := dec.Decode(&v)
			return v, err == nil
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return "", false
		}
	}
	return "", false
}
