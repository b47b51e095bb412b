package idem

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/internal/work"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// Route is an operation with no policy, served by the same router as the
// protected ones (Config.Unprotected).
type Route struct {
	Method string
	// Path is its path template, below Config.BasePath.
	Path string
	// OperationID names it in errors; it may be empty.
	OperationID string
}

// router finds the operation of a request by method and path template. It
// reads a path as net/http's ServeMux does (segments split on "/", then each
// one percent-decoded) so that the engine protects every request the
// application's router sends to a protected handler.
type router struct {
	// base holds BasePath's decoded segments, matched before the template.
	base []string
	// byMethod holds the operations of one method, most specific first,
	// the unprotected routes among them: a path that one of those matches
	// first is the unprotected route's, as the application's router
	// reads it, and passes through.
	byMethod map[string][]*operation
}

func newRouter(basePath string) (router, error) {
	rt := router{byMethod: make(map[string][]*operation)}
	if basePath == "" || basePath == "/" {
		return rt, nil
	}
	base, ok := pathtemplate.Split(strings.TrimSuffix(basePath, "/"))
	if !ok {
		return rt, fmt.Errorf("idem: BasePath %q does not start with /", basePath)
	}
	for _, s := range base {
		rt.base = append(rt.base, pathtemplate.Decode(s))
	}
	return rt, nil
}

// add registers op, refusing a template that overlaps another of the same
// method: no request may be one operation's or the other's by accident.
func (rt *router) add(op *operation) error {
	ops := rt.byMethod[op.Method]
	for _, o := range ops {
		if o.unprotected && op.unprotected {
			continue // neither is the engine's
		}
		if pathtemplate.Overlap(o.template, op.template) {
			return fmt.Errorf("idem: %s %s (%s) and %s %s (%s) match the same requests; neither is more specific",
				o.Method, o.Path, o.OperationID, op.Method, op.Path, op.OperationID)
		}
	}
	ops = append(ops, op)
	slices.SortStableFunc(ops, func(a, b *operation) int {
		switch {
		case pathtemplate.Less(a.template, b.template):
			return -1
		case pathtemplate.Less(b.template, a.template):
			return 1
		}
		return 0
	})
	rt.byMethod[op.Method] = ops
	return nil
}

// route is what the router decided for one request.
type route struct {
	op     *operation
	params map[string]string
	// near is set when routers could disagree on whether the path is
	// op's: it becomes op's once empty and dot segments are removed (a
	// router that cleans paths or strips trailing slashes would serve it as
	// op), or it spells a character with a needless or lower-case escape
	// (ServeMux decodes "/%61ccounts" to "/accounts"; chi matches the
	// escaped form and may pick another route). Such a request is refused
	// rather than protected by a guess.
	near bool
}

// protects reports whether a protected operation takes method.
func (rt *router) protects(method string) bool {
	for _, op := range rt.byMethod[method] {
		if !op.unprotected {
			return true
		}
	}
	return false
}

func (rt *router) find(method, escapedPath string) route {
	var r route
	r.op, r.params, r.near = rt.match(method, escapedPath)
	return r
}

// match is find. It counts the bytes of the path it reads (internal/work):
// each pass over it, and the bytes handed to each template's matching,
// which reads each of them a bounded number of times (pathtemplate's
// TestMatchWorkIsLinear), so that tests can hold it to the path's length.
func (rt *router) match(method, escapedPath string) (*operation, map[string]string, bool) {
	ops := rt.byMethod[method]
	if len(ops) == 0 {
		return nil, nil, false
	}
	work.Add(len(escapedPath))
	segs, ok := pathtemplate.Split(escapedPath)
	if !ok {
		return nil, nil, false
	}
	// unprotected is set when the path matched a route without a policy
	// first: it is that route's unless another reading below, one a
	// router makes, is a protected operation's.
	unprotected := false
	if rest, ok := cutSegments(segs, rt.base); ok {
		size := bytesOf(rest)
		for i, op := range ops {
			work.Add(size)
			params, ok := op.template.Match(rest)
			if !ok {
				continue
			}
			o := rival(ops, i, params, rest, size)
			if op.unprotected {
				if o != nil {
					return o, nil, true
				}
				unprotected = true
				break
			}
			// An escaped "/" at the very end reads as a trailing slash
			// to a router that matches the decoded path.
			work.Add(len(segs[len(segs)-1]))
			near := o != nil || !canonicalEscapes(escapedPath) || strings.HasSuffix(pathtemplate.Decode(segs[len(segs)-1]), "/") ||
				rt.decodedElsewhere(method, op, escapedPath, segs)
			return op, params, near
		}
		// A mixed segment cut elsewhere than at the first byte of its
		// text ("a:b:cancel" for "{name}:cancel", cut at the last ":")
		// is the operation's to a router or handler that splits it so.
		for _, op := range ops {
			work.Add(size)
			if !unprotected && !op.unprotected && op.template.MatchAnySplit(rest) {
				return op, nil, true
			}
		}
	}
	work.Add(len(escapedPath))
	if !normalizable(escapedPath, segs) {
		// No router reads this path as another one: the candidates
		// below would all be segs again.
		return nil, nil, false
	}
	// Routers normalize paths in different ways: chi's StripSlashes drops
	// empty segments and keeps dot segments as values; others resolve dot
	// segments as well. A path that either way becomes a protected one is
	// refused.
	// chi also takes an empty segment as a parameter's value, and its
	// StripSlashes routes a path with a trailing slash by its decoded form,
	// where an escaped "%2F" separates segments.
	trimmed := trimTrailing(segs)
	decoded := decodeAll(segs)
	work.Add(len(decoded)) // split on "/"
	resplit := trimTrailing(strings.Split(decoded, "/"))
	readings := [][]string{dropEmpty(segs), cleanSegments(segs), fillEmpty(trimmed), fillEmpty(resplit)}
	if rawRouted(escapedPath, decoded) {
		// chi and echo match the path as the request escaped it when it
		// is not Go's own spelling of the decoded one: "/pay/b%61tch"
		// is no "/pay/batch" to them, and "//account%73" is
		// /{a}/{b}'s to chi, not /{a}/accounts's. (A protected
		// operation's path with such an escape was refused above.)
		raw := rawSegments(segs)
		readings = append(readings, raw, fillEmpty(trimTrailing(raw)))
	}
	for _, clean := range readings {
		rest, ok := cutSegments(clean, rt.base)
		if !ok {
			continue
		}
		size := bytesOf(rest)
		for _, op := range ops {
			work.Add(size)
			if _, ok := op.template.Match(rest); ok {
				if op.unprotected {
					break // this reading is the unprotected route's
				}
				return op, nil, true
			}
		}
	}
	return nil, nil, false
}

// rival returns the operation another router may read rest as, where
// ops[i] matched it with params: a more specific template that matches it
// once a mixed segment is cut elsewhere (MatchRoutedSplit: gorilla/mux
// cuts "a:b:cancel" for "{name}:cancel" at its last ":"), or, when a
// parameter of ops[i] is empty (chi lets one be, within the path), a less
// specific template that matches rest too (gorilla/mux never lets one be
// empty). When ops[i] is unprotected only a protected rival counts; nil
// when there is none. It counts the bytes it hands each template.
func rival(ops []*operation, i int, params map[string]string, rest []string, size int) *operation {
	empty := false
	for _, v := range params {
		empty = empty || v == ""
	}
	for j, o := range ops {
		if j == i || (ops[i].unprotected && o.unprotected) {
			continue
		}
		work.Add(size)
		if j < i && o.template.MatchRoutedSplit(rest) {
			return o
		}
		if j > i && empty {
			if _, ok := o.template.Match(rest); ok {
				return o
			}
		}
	}
	return nil
}

// rawRouted reports whether chi and echo match escapedPath as it is
// written rather than decoded: when Go keeps it as the request's RawPath,
// which it does when it is not Go's own spelling of the decoded path.
// decoded is the path after its leading "/", decoded segment by segment.
// It counts the bytes it spells.
func rawRouted(escapedPath, decoded string) bool {
	work.Add(2 * len(decoded))
	return (&url.URL{Path: "/" + decoded}).EscapedPath() != escapedPath
}

// rawSegments are segs read as written: each escape stands for its own
// three characters, as a router matching the escaped path reads it. Like
// every candidate builder, it counts the bytes it reads.
func rawSegments(segs []string) []string {
	out := make([]string, len(segs))
	for i, s := range segs {
		work.Add(len(s) + 1)
		out[i] = strings.ReplaceAll(s, "%", "%25")
	}
	return out
}

// decodedElsewhere reports whether a router that matches the decoded path
// (gin by default), where an escaped "/" inside a segment separates
// segments, reads a path that matched op as another protected operation
// or as none: "/customers/c1%2Fbalance" is updateCustomer {id: "c1/balance"}
// to the engine, ServeMux, chi and ogen, and /customers/{id}/balance to
// gin. It counts the bytes it reads.
func (rt *router) decodedElsewhere(method string, op *operation, escapedPath string, segs []string) bool {
	work.Add(len(escapedPath))
	if !strings.Contains(escapedPath, "%2F") {
		return false
	}
	decoded := decodeAll(segs)
	work.Add(len(decoded)) // split on "/"
	rest, ok := cutSegments(fillEmpty(strings.Split(decoded, "/")), rt.base)
	if !ok {
		return true
	}
	size := bytesOf(rest)
	for _, o := range rt.byMethod[method] {
		work.Add(size)
		if _, ok := o.template.Match(rest); ok {
			return o != op
		}
	}
	return true
}

// bytesOf is the length of segs' bytes together.
func bytesOf(segs []string) int {
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	return n
}

// mountPrefix returns the decoded segments of prefix, the part of a
// request path in front of a per-route handler's template, or nil when it
// is BasePath: only a prefix the engine does not know to be the mount can
// name a resource.
func (rt *router) mountPrefix(prefix []string) []string {
	if rest, ok := cutSegments(prefix, rt.base); ok && len(rest) == 0 {
		return nil
	}
	out := make([]string, len(prefix))
	for i, s := range prefix {
		out[i] = pathtemplate.Decode(s)
	}
	return out
}

// cutSegments removes prefix, decoded segments, from the front of segs,
// segments as written. It counts the bytes it decodes.
func cutSegments(segs, prefix []string) ([]string, bool) {
	if len(segs) < len(prefix) {
		return nil, false
	}
	for i, p := range prefix {
		work.Add(len(segs[i]))
		if pathtemplate.Decode(segs[i]) != p {
			return nil, false
		}
	}
	return segs[len(prefix):], true
}

// normalizable reports whether some router could read the path as
// another one: it has an empty or dot segment, or an escape.
func normalizable(escapedPath string, segs []string) bool {
	if strings.IndexByte(escapedPath, '%') >= 0 {
		return true
	}
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return true
		}
	}
	return false
}

// dropEmpty drops empty segments ("//", a trailing "/"). Like every
// candidate builder below, it counts the bytes it reads.
func dropEmpty(segs []string) []string {
	out := make([]string, 0, len(segs))
	for _, s := range segs {
		work.Add(len(s) + 1)
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// trimTrailing drops one empty last segment (a trailing slash).
func trimTrailing(segs []string) []string {
	if n := len(segs); n > 1 && segs[n-1] == "" {
		return segs[:n-1]
	}
	return segs
}

// decodeAll is the decoded path after its leading "/", segments joined.
func decodeAll(segs []string) string {
	var b strings.Builder
	for i, s := range segs {
		work.Add(len(s) + 1)
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(pathtemplate.Decode(s))
	}
	return b.String()
}

// fillEmpty puts a stand-in value in every empty segment, so that a
// template with a whole parameter there matches, as chi gives it the
// empty value. The stand-in is one no mixed segment matches (each holds
// literal text, which no escaped spelling finds in "%/"), since chi takes
// an empty segment for a whole parameter only: "//v1" is /{a}/v1's, not
// /{a}-{b}/v1's.
func fillEmpty(segs []string) []string {
	out := make([]string, len(segs))
	for i, s := range segs {
		work.Add(len(s) + 1)
		if s == "" {
			s = "%/"
		}
		out[i] = s
	}
	return out
}

// cleanSegments drops empty and "." segments and resolves "..", as path
// cleaning routers do (ServeMux redirects to the cleaned path; chi's
// StripSlashes serves it).
func cleanSegments(segs []string) []string {
	out := make([]string, 0, len(segs))
	for _, s := range segs {
		work.Add(len(s) + 1)
		switch pathtemplate.Decode(s) {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	return out
}

// canonicalEscapes reports whether every percent-escape in p is one a
// request needs, spelled as RFC 3986 §6.2.2 normalizes it: upper-case hex,
// for "/" inside a segment or a character Go's url package escapes itself
// (space, "?", "%", non-ASCII, …). An escape of anything else ("%61",
// "%3A") changes how routers read the path: ServeMux decodes it, chi then
// matches the escaped form. It counts the bytes it reads.
func canonicalEscapes(p string) bool {
	for i := strings.IndexByte(p, '%'); i >= 0; i = strings.IndexByte(p, '%') {
		work.Add(i + 1)
		if i+2 >= len(p) {
			return true // not an escape; routers keep it as it is
		}
		h := p[i+1 : i+3]
		v, err := strconv.ParseUint(h, 16, 8)
		switch {
		case err != nil:
			// Not an escape either.
		case h != strings.ToUpper(h), !needsEscape(byte(v)):
			return false
		}
		p = p[i+1:]
	}
	return true
}

// needsEscape reports whether c is escaped in a canonical path: "/" (which
// only an escape keeps inside a segment) and whatever net/url escapes in a
// path.
func needsEscape(c byte) bool {
	switch {
	case c == '/':
		return true
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return false
	}
	return !strings.ContainsRune("-._~$&+,:;=@", rune(c))
}
