package idemclient

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemgen/idemgen/runtime/key"
)

// ErrInvalidKey is wrapped by the error of a call whose key (given with
// WithKey, or already in the request) the server would refuse with a 400;
// nothing is sent.
var ErrInvalidKey = errors.New("idemclient: invalid idempotency key")

// freshKey returns a new key: 128 random bits in base32, 26 characters,
// which no two clients will ever draw alike; cut to maxLen characters (5
// random bits each) for an operation whose keys are shorter, which New
// allows down to minFreshKey.
func freshKey(maxLen int) string {
	k := rand.Text()
	if maxLen > 0 && maxLen < len(k) {
		k = k[:maxLen]
	}
	return k
}

// minFreshKey is the shortest key the Transport draws: 16 characters, 80
// random bits, which two keys of one tenant and operation within a TTL do
// not share by chance.
const minFreshKey = 16

// checkKey applies the server's rule (docs/semantics.md §2) for a key carried
// in where to a key the caller chose: key.CheckBody for a body key,
// key.Check otherwise; maxLen 0 sets no limit of the operation's own.
func checkKey(k string, maxLen int, where key.In) error {
	if maxLen <= 0 {
		maxLen = math.MaxInt
	}
	check := key.Check
	if where == key.InBody {
		check = key.CheckBody
	}
	if err := check(k, maxLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}

// attachKey makes req (a clone the caller owns) and body carry a key for
// op and returns the key and the body to send on every attempt. ok is false
// when no key can be attached (a body key under a nested pointer the body
// lacks, a body that is not an object): such a request is sent once, since
// a retry without a key could run the operation twice.
func attachKey(req *http.Request, body []byte, op *Operation, want string) (k string, out []byte, ok bool, err error) {
	switch op.Key.In {
	case key.InHeader, key.InQuery:
		var (
			got     string
			present bool
			err     error
		)
		if op.Key.In == key.InHeader {
			gatherHeader(req.Header, op.Key.Name)
			dropEmptyHeader(req.Header, op.Key.Name)
			got, present, err = key.FromHeader(req.Header, op.Key.Name, op.KeyMaxLength)
		} else {
			dropEmptyQuery(req, op.Key.Name)
			got, present, err = key.FromQuery(req.URL.Query(), op.Key.Name, op.KeyMaxLength)
		}
		if err != nil {
			return "", nil, false, fmt.Errorf("%w: %w", ErrInvalidKey, err)
		}
		if present {
			return got, body, true, nil
		}
		k, err := chooseKey(want, op)
		if err != nil {
			return "", nil, false, err
		}
		if op.Key.In == key.InHeader {
			req.Header.Set(op.Key.Name, headerValue(k))
			return k, body, true, nil
		}
		// Appended rather than re-encoded, so the caller's parameters keep
		// their order and spelling.
		u := *req.URL
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += url.QueryEscape(op.Key.Name) + "=" + url.QueryEscape(k)
		req.URL = &u
		return k, body, true, nil
	default:
		return attachBodyKey(req, body, op, want)
	}
}

// gatherHeader moves the values of every spelling of the header name in h
// (a caller may set the map directly, as "idempotency-key") under its
// canonical spelling. net/http sends each spelling as its own line, and the
// server reads them all as one header: a key under another spelling is the
// request's key, and two are a repeated header.
func gatherHeader(h http.Header, name string) {
	canon := http.CanonicalHeaderKey(name)
	for k, vs := range h {
		if k != canon && strings.EqualFold(k, canon) {
			h[canon] = append(h[canon], vs...)
			delete(h, k)
		}
	}
}

// dropEmptyHeader removes a key header sent once with an empty value, so
// that the Transport chooses the key. A client generated from a spec that
// requires the key writes the header whether or not its caller set it,
// empty when not; the server refuses an empty key, so an empty value can
// only mean that the caller left the choice to the Transport.
func dropEmptyHeader(h http.Header, name string) {
	if vs := h.Values(name); len(vs) == 1 && vs[0] == "" {
		h.Del(name)
	}
}

// dropEmptyQuery removes a key query parameter sent once with an empty
// value, as dropEmptyHeader does for a header, keeping the other
// parameters as the caller spelled them.
func dropEmptyQuery(req *http.Request, name string) {
	if vs, ok := req.URL.Query()[name]; !ok || len(vs) != 1 || vs[0] != "" {
		return
	}
	var kept []string
	for _, part := range strings.Split(req.URL.RawQuery, "&") {
		k, _, _ := strings.Cut(part, "=")
		if dk, err := url.QueryUnescape(k); err == nil && dk == name {
			continue
		}
		kept = append(kept, part)
	}
	u := *req.URL
	u.RawQuery = strings.Join(kept, "&")
	req.URL = &u
}

func chooseKey(want string, op *Operation) (string, error) {
	if want == "" {
		return freshKey(op.KeyMaxLength), nil
	}
	if err := checkKey(want, op.KeyMaxLength, op.Key.In); err != nil {
		return "", err
	}
	return want, nil
}

// headerValue writes k so that the server reads k back: a key that starts
// with a double quote would be read as a structured-field string, so it is
// sent as one.
func headerValue(k string) string {
	if !strings.HasPrefix(k, `"`) {
		return k
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(k) + `"`
}

func attachBodyKey(req *http.Request, body []byte, op *Operation, want string) (string, []byte, bool, error) {
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil {
		return "", body, false, nil
	}
	got, present, err := key.FromBody(body, mt, op.Key.Name, op.KeyMaxLength)
	if errors.Is(err, key.ErrInvalid) {
		return "", nil, false, fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	if err != nil {
		// The server will refuse the body itself; a retry cannot help.
		return "", body, false, nil
	}
	if present {
		return got, body, true, nil
	}
	// Only a top-level member can be added without rewriting the body.
	name, ok := topMember(op)
	if !ok {
		return "", body, false, nil
	}
	k, err := chooseKey(want, op)
	if err != nil {
		return "", nil, false, err
	}
	var out []byte
	switch {
	case mt == "application/x-www-form-urlencoded":
		out = append([]byte(nil), body...)
		if len(bytes.TrimSpace(out)) > 0 {
			out = append(out, '&')
		}
		out = append(out, url.QueryEscape(name)+"="+url.QueryEscape(k)...)
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		out, ok = addMember(body, name, k)
		if !ok {
			return "", body, false, nil
		}
	default:
		return "", body, false, nil
	}
	req.ContentLength = int64(len(out))
	return k, out, true, nil
}

// addMember returns the JSON object body with the member name: value added
// first, leaving every other byte as the caller wrote it; an empty body is
// the empty object. ok is false when body is not an object.
func addMember(body []byte, name, value string) ([]byte, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		trimmed = []byte("{}")
	}
	if trimmed[0] != '{' {
		return nil, false
	}
	rest := bytes.TrimSpace(trimmed[1:])
	// Marshalling a string cannot fail.
	n, _ := json.Marshal(name)
	v, _ := json.Marshal(value)
	out := append([]byte("{"), n...)
	out = append(out, ':')
	out = append(out, v...)
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), true
}

// topMember is the name of op's body key when its JSON pointer names a
// top-level member, unescaped.
func topMember(op *Operation) (string, bool) {
	name, ok := strings.CutPrefix(op.Key.Name, "/")
	if !ok || strings.Contains(name, "/") {
		return "", false
	}
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(name), true
}
