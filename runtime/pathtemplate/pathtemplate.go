// Package pathtemplate parses OpenAPI path templates and matches request
// paths against them the way net/http's ServeMux reads a path: split on
// "/", each segment percent-decoded on its own.
//
// The generator and the runtime both parse templates here, so a template the
// generator accepts is one the engine can serve, with the same parameters.
//
// A template is a sequence of segments. A segment is literal text
// ("accounts"), a whole parameter ("{id}"), or a mix of both
// ("{Sid}.json", "{name}:cancel", "{a}-{b}"). In a mixed segment a
// parameter followed by literal text ends at the first byte that can start
// that text, and the text must follow there: "{a}-{b}" reads "x-y-z" as
// a="x", b="y-z", and "{Sid}.json" does not match "a.b.json". A parameter
// of a mixed segment may be empty ("{a}-{b}" reads "-y" as a="", b="y"),
// except where it would end the path: "/files/v{version}" does not match
// "/files/v", nor "/range/{a}-{b}" "/range/1-". That is how chi reads such
// routes, so the engine, the client and the router agree on which route
// and resource a request names. Two parameters with no literal between
// them cannot be told apart and are refused.
package pathtemplate

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/idemgen/idemgen/internal/work"
)

// Template is a parsed path template. Its zero value is not usable; make one
// with Parse.
type Template struct {
	raw    string
	segs   []segment
	params []string
}

// segment is one "/"-separated piece of a template: alternating literal
// text and parameters. parts[i] is literal when name is empty.
type segment struct {
	parts []part
}

type part struct {
	lit  string // decoded literal text; set when name is ""
	esc  string // lit as a request spells it, percent-encoded
	name string // parameter name
}

// Kind orders segments by how specific they are: a literal segment beats a
// mixed one, which beats a whole parameter (net/http ranks literals over
// wildcards the same way).
type Kind int

// The kinds of segment, least specific first.
const (
	KindParam Kind = iota + 1
	KindMixed
	KindLiteral
)

func (s segment) kind() Kind {
	switch {
	case len(s.parts) == 1 && s.parts[0].name == "":
		return KindLiteral
	case len(s.parts) == 1:
		return KindParam
	default:
		return KindMixed
	}
}

// SyntaxError is a template that cannot be parsed. Offset is the byte in the
// template where the problem is, for diagnostics that point into a spec.
type SyntaxError struct {
	Template string
	Offset   int
	Msg      string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("path template %q: %s", e.Template, e.Msg)
}

// Parse parses an OpenAPI path template such as "/pets/{pet_id}/adoptions".
// It refuses what a request path could never match or could match two ways:
// no leading "/", a query string or fragment, unbalanced or nested braces,
// an empty or repeated parameter name, two parameters side by side in one
// segment, and literal text that is not validly percent-encoded.
func Parse(s string) (*Template, error) {
	errAt := func(off int, format string, args ...any) error {
		return &SyntaxError{Template: s, Offset: off, Msg: fmt.Sprintf(format, args...)}
	}
	if !strings.HasPrefix(s, "/") {
		return nil, errAt(0, "does not start with /")
	}
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		return nil, errAt(i, "holds %q: a path template cannot carry a query string or fragment (declare query parameters instead)", s[i:i+1])
	}
	t := &Template{raw: s}
	seen := make(map[string]bool)
	off := 1
	for _, raw := range strings.Split(s[1:], "/") {
		seg, err := parseSegment(raw, off, seen, errAt)
		if err != nil {
			return nil, err
		}
		for _, p := range seg.parts {
			if p.name != "" {
				t.params = append(t.params, p.name)
			}
		}
		t.segs = append(t.segs, seg)
		off += len(raw) + 1
	}
	return t, nil
}

func parseSegment(raw string, off int, seen map[string]bool, errAt func(int, string, ...any) error) (segment, error) {
	var seg segment
	i := 0
	for i < len(raw) {
		switch raw[i] {
		case '{':
			end := strings.IndexByte(raw[i:], '}')
			if end < 0 {
				return seg, errAt(off+i, "a { is never closed")
			}
			name := raw[i+1 : i+end]
			switch {
			case name == "":
				return seg, errAt(off+i, "a parameter has no name")
			case strings.IndexByte(name, '{') >= 0:
				return seg, errAt(off+i, "braces are nested")
			case seen[name]:
				return seg, errAt(off+i, "parameter {%s} appears twice", name)
			}
			if n := len(seg.parts); n > 0 && seg.parts[n-1].name != "" {
				return seg, errAt(off+i, "parameters {%s} and {%s} touch: a request path cannot say where one ends", seg.parts[n-1].name, name)
			}
			seen[name] = true
			seg.parts = append(seg.parts, part{name: name})
			i += end + 1
		case '}':
			return seg, errAt(off+i, "a } has no matching {")
		default:
			end := strings.IndexAny(raw[i:], "{}")
			if end < 0 {
				end = len(raw) - i
			}
			lit, err := url.PathUnescape(raw[i : i+end])
			if err != nil {
				return seg, errAt(off+i, "literal %q is not validly percent-encoded", raw[i:i+end])
			}
			seg.parts = append(seg.parts, part{lit: lit, esc: url.PathEscape(lit)})
			i += end
		}
	}
	if len(seg.parts) == 0 {
		// An empty segment ("/a//b", a trailing "/") matches only an empty
		// request segment.
		seg.parts = []part{{lit: ""}}
	}
	return seg, nil
}

// String returns the template as it was written.
func (t *Template) String() string { return t.raw }

// Shape is the template with its parameters' names erased ("/pets/{}"):
// two templates of one shape match the same requests, so a renamed
// parameter leaves a route the same route.
func (t *Template) Shape() string {
	var b strings.Builder
	for _, s := range t.segs {
		b.WriteByte('/')
		for _, p := range s.parts {
			if p.name == "" {
				b.WriteString(p.lit)
			} else {
				b.WriteString("{}")
			}
		}
	}
	return b.String()
}

// Params returns the parameter names in the order they appear.
func (t *Template) Params() []string { return append([]string(nil), t.params...) }

// Segments reports how many segments a matching path has.
func (t *Template) Segments() int { return len(t.segs) }

// RequestPath is the escaped path of u (url.URL.EscapedPath), the path
// every reader of u in this module matches, and whether each router reads
// u's path so: ok is false when u.RawPath is set but is not what
// EscapedPath returns. net/http keeps a request line's path as written in
// RawPath whenever it is not Go's own spelling of the decoded path, and
// chi, echo and gin with UseRawPath route on RawPath; EscapedPath gives
// RawPath up when it is not a valid encoding of Path (a byte beyond
// ASCII, or a character a URL must escape, such as '"', '<', '{', '|',
// '^' or '`', left raw) and spells the decoded path escaped anew, where
// an escaped "/" beside such a byte has become a separator. No one
// reading of such a path is every router's. A RawPath that is Path itself
// (a raw "/café", no escape in it) is read alike by all, and ok, unless it
// holds a "+"; nor is one with an escape that leaves raw a character Go
// escapes (one of ! ' ( ) * [ ]) or a "+". A client sends EscapedPath
// (url.URL.RequestURI), so for a request it sends the path is what goes
// on the wire whatever ok says.
func RequestPath(u *url.URL) (escapedPath string, ok bool) {
	escapedPath = u.EscapedPath()
	if u.RawPath == "" {
		return escapedPath, true
	}
	if strings.IndexByte(u.RawPath, '+') >= 0 {
		// gin with UseRawPath decodes a parameter read from RawPath as a
		// query value, where "+" is a space.
		return escapedPath, false
	}
	if u.RawPath == u.Path {
		return escapedPath, true // no escape in it: raw and decoded agree
	}
	// chi and echo hand a parameter over as written in RawPath, and a
	// character Go escapes but a URL may leave raw, beside an escape,
	// reads otherwise than in Go's own spelling of the same path.
	return escapedPath, u.RawPath == escapedPath && !strings.ContainsAny(u.RawPath, "!'()*[]")
}

// Split cuts an escaped request path (url.URL.EscapedPath) into its
// segments as written, on "/": an escaped "%2F" stays inside its segment.
// ok is false when the path does not start with "/".
func Split(escapedPath string) (segs []string, ok bool) {
	if !strings.HasPrefix(escapedPath, "/") {
		return nil, false
	}
	return strings.Split(escapedPath[1:], "/"), true
}

// Decode percent-decodes one segment as net/http's ServeMux does: a segment
// that is not validly encoded is kept as it came.
func Decode(seg string) string {
	if strings.IndexByte(seg, '%') < 0 {
		return seg
	}
	if d, err := url.PathUnescape(seg); err == nil {
		return d
	}
	return seg
}

// Match reports whether a request's segments, as written (from Split), fit
// t, and the parameters' decoded values when they do. A literal or whole
// parameter segment is compared decoded, as ServeMux compares it; a mixed
// segment is cut where its literal text stands as written, as chi cuts it,
// so "%3A" inside a value is never taken for the ":" of "{name}:cancel".
// A whole-segment parameter never matches an empty segment (ServeMux
// redirects such a path). A parameter in a mixed segment may be empty, as
// chi lets it be, unless it ends the path: chi never gives a parameter an
// empty value there, and serves "/files/v" with "/files/{name}" rather
// than "/files/v{version}", so the engine must read it so too.
func (t *Template) Match(segs []string) (map[string]string, bool) {
	if len(segs) != len(t.segs) {
		return nil, false
	}
	var params map[string]string
	for i, s := range t.segs {
		if !s.match(segs[i], &params, len(t.params), i == len(t.segs)-1) {
			return nil, false
		}
	}
	return params, true
}

// MatchSuffix matches t against the last segments of a path, for a handler
// that knows its operation but not the prefix it is mounted under.
func (t *Template) MatchSuffix(segs []string) (map[string]string, bool) {
	if len(segs) < len(t.segs) {
		return nil, false
	}
	return t.Match(segs[len(segs)-len(t.segs):])
}

// match matches one segment; last says it ends the path, where no
// parameter is empty.
func (s segment) match(raw string, params *map[string]string, n int, last bool) bool {
	set := func(name, val string) {
		if *params == nil {
			*params = make(map[string]string, n)
		}
		work.Add(len(val))
		(*params)[name] = Decode(val)
	}
	switch s.kind() {
	case KindLiteral:
		work.Add(len(raw))
		return Decode(raw) == s.parts[0].lit
	case KindParam:
		if raw == "" {
			return false
		}
		set(s.parts[0].name, raw)
		return true
	}
	v := raw
	for j := 0; j < len(s.parts); j++ {
		p := s.parts[j]
		if p.name == "" {
			work.Add(len(p.esc))
			rest, ok := strings.CutPrefix(v, p.esc)
			if !ok {
				return false
			}
			v = rest
			continue
		}
		if j == len(s.parts)-1 {
			if last && v == "" {
				return false
			}
			set(p.name, v)
			return true
		}
		// A parameter followed by literal text ends at the first byte
		// that can start that text, as chi reads it; the text must then
		// follow, or the segment does not match.
		end := strings.IndexByte(v, s.parts[j+1].esc[0])
		if end < 0 {
			work.Add(len(v))
			return false
		}
		work.Add(end)
		set(p.name, v[:end])
		v = v[end:]
	}
	return v == ""
}

// MatchAnySplit reports whether segs fit t when a parameter followed by
// literal text may end at any place where that text stands, not only at
// its first byte as Match reads it. A router or handler that splits such a
// segment itself (ServeMux has no mixed segments, so "{name}:cancel" is
// often a "{spec}" cut at its last ":") can serve a path that Match turns
// away; the engine refuses what only MatchAnySplit accepts, rather than let
// it pass unprotected. Such a handler may also take an empty value for a
// parameter that ends the path ("v" of a "{spec}" serving
// "/files/v{version}"), so MatchAnySplit accepts one there.
func (t *Template) MatchAnySplit(segs []string) bool {
	return t.matchAnySplit(segs, true)
}

// MatchRoutedSplit is MatchAnySplit as a router reads the path: the cut
// may fall at any place ("{name}:cancel" is a "[^/]+:cancel" to
// gorilla/mux, which cuts "a:b:cancel" at its last ":"), but a parameter
// that ends the path is never empty, as Match has it. A template that
// matches a path only so, more specific than the one Match finds, is the
// route such a router picks.
func (t *Template) MatchRoutedSplit(segs []string) bool {
	return t.matchAnySplit(segs, false)
}

func (t *Template) matchAnySplit(segs []string, emptyEnd bool) bool {
	if len(segs) != len(t.segs) {
		return false
	}
	for i, s := range t.segs {
		if !s.matchAnySplit(segs[i], emptyEnd || i < len(t.segs)-1) {
			return false
		}
	}
	return true
}

// matchAnySplit matches one segment cut anywhere; emptyLast lets its last
// part, a parameter, be empty.
func (s segment) matchAnySplit(raw string, emptyLast bool) bool {
	switch s.kind() {
	case KindLiteral:
		work.Add(len(raw))
		return Decode(raw) == s.parts[0].lit
	case KindParam:
		return raw != ""
	}
	// starts holds, in ascending order, every offset in raw at which the
	// next part can begin. A parameter may be of any length, so the text
	// after it may begin at any of its occurrences from the first start
	// on. One pass per part keeps a hostile segment linear in the number
	// of parts, never exponential in the number of cuts.
	starts := []int{0}
	for j, p := range s.parts {
		var next []int
		switch {
		case p.name == "":
			for _, at := range starts {
				work.Add(len(p.esc))
				if strings.HasPrefix(raw[at:], p.esc) {
					next = append(next, at+len(p.esc))
				}
			}
		case j == len(s.parts)-1:
			// The parameter takes the rest from any start: it is
			// empty only from the last, which is the end.
			return emptyLast || starts[0] < len(raw)
		default:
			text := s.parts[j+1].esc
			for off := starts[0]; off <= len(raw); off++ {
				i := strings.Index(raw[off:], text)
				if i < 0 {
					work.Add(len(raw) - off)
					break
				}
				work.Add(i + len(text))
				off += i
				next = append(next, off)
			}
		}
		if len(next) == 0 {
			return false
		}
		starts = next
	}
	return starts[len(starts)-1] == len(raw)
}

// Expand builds an escaped request path from parameter values, the inverse
// of Match: each value is percent-encoded as one path segment's content.
// A missing value is an error.
func (t *Template) Expand(values map[string]string) (string, error) {
	return t.expand(values, false)
}

// expand is Expand; allowEmpty lets a parameter's value be empty, as
// Match can find one in a mixed segment, so that the fuzz test can rebuild
// every path Match took apart.
func (t *Template) expand(values map[string]string, allowEmpty bool) (string, error) {
	var b strings.Builder
	for _, s := range t.segs {
		b.WriteByte('/')
		for _, p := range s.parts {
			if p.name == "" {
				b.WriteString(url.PathEscape(p.lit))
				continue
			}
			v, ok := values[p.name]
			if !ok || (v == "" && !allowEmpty) {
				return "", fmt.Errorf("path template %q: no value for {%s}", t.raw, p.name)
			}
			b.WriteString(url.PathEscape(v))
		}
	}
	return b.String(), nil
}

// Overlap reports whether a and b cannot both be served: some request path
// matches both, and neither is the more specific (at every segment as
// specific as the other, or more). net/http's ServeMux refuses such a pair
// of patterns for the same reason: which one a request reaches would be an
// accident. Two mixed segments it cannot tell apart count as overlapping.
func Overlap(a, b *Template) bool {
	shared, aWins, bWins := compare(a, b)
	return shared && aWins == bWins
}

// Shared reports whether some request path may match both a and b, with
// either more specific or neither (two mixed segments it cannot tell
// apart count as sharing paths). A router sends such a path to the more
// specific one (Less), as ServeMux and chi do.
func Shared(a, b *Template) bool {
	shared, _, _ := compare(a, b)
	return shared
}

// compare reports whether a and b may match one path, and whether each
// is more specific than the other at some segment.
func compare(a, b *Template) (shared, aWins, bWins bool) {
	if len(a.segs) != len(b.segs) {
		return false, false, false
	}
	for i := range a.segs {
		sa, sb := a.segs[i], b.segs[i]
		if !sa.mayOverlap(sb) {
			return false, false, false
		}
		switch ka, kb := sa.kind(), sb.kind(); {
		case ka > kb:
			aWins = true
		case kb > ka:
			bWins = true
		}
	}
	return true, aWins, bWins
}

// Less orders templates for matching. Only templates with as many
// segments as a path can match it, so shorter ones come first; among those
// of one length, at the first segment where their kinds differ the more
// specific kind comes first (a literal before a mixed segment before a
// parameter), as net/http prefers literals. This is a strict weak order,
// so sorting by it is well defined.
func Less(a, b *Template) bool {
	if len(a.segs) != len(b.segs) {
		return len(a.segs) < len(b.segs)
	}
	for i := range a.segs {
		ka, kb := a.segs[i].kind(), b.segs[i].kind()
		if ka != kb {
			return ka > kb
		}
	}
	return false
}

// mayOverlap reports whether one decoded segment could match both s and o.
func (s segment) mayOverlap(o segment) bool {
	ks, ko := s.kind(), o.kind()
	if ks < ko {
		s, o, ks, ko = o, s, ko, ks
	}
	// Now s is at least as specific as o.
	switch {
	case ko == KindParam:
		return true
	case ks == KindLiteral && ko == KindLiteral:
		return s.parts[0].lit == o.parts[0].lit
	case ks == KindLiteral:
		var scratch map[string]string
		return o.match(s.parts[0].esc, &scratch, 0, false)
	}
	// Two mixed segments are told apart when their literal prefixes or
	// suffixes disagree.
	pa, pb := s.parts[0].lit, o.parts[0].lit
	if !strings.HasPrefix(pa, pb) && !strings.HasPrefix(pb, pa) {
		return false
	}
	la, lb := s.parts[len(s.parts)-1].lit, o.parts[len(o.parts)-1].lit
	return strings.HasSuffix(la, lb) || strings.HasSuffix(lb, la)
}

// FromColons writes the path of a gin or echo route in braces, as a
// template (and a ServeMux pattern) writes it: ":id" as "{id}", a
// catch-all "*rest" as "{rest...}" (which is no template: no operation's
// route).
func FromColons(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, ":"):
			segs[i] = "{" + s[1:] + "}"
		case strings.HasPrefix(s, "*"):
			segs[i] = "{" + s[1:] + "...}"
		}
	}
	return strings.Join(segs, "/")
}
