package fingerprint

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemgen/idemgen/internal/work"
)

// formNode is one name in a form's nesting tree. A name holds plain values
// (a=1&a=2), appended values (a[]=1&a[]=2) or named children (a[b]=1), never
// a mix of them.
type formNode struct {
	values   []string
	appended []string
	names    []string // children in order of first appearance
	children map[string]*formNode
}

// formPair is one name=value pair of a form body, decoded, with the parts
// of its name (see splitFormName).
type formPair struct {
	name, value string
	segs        []string
	appendTo    bool
}

// formPairs decodes the pairs of an application/x-www-form-urlencoded body
// as net/http's ParseForm reads them: split at '&', empty pairs skipped, a
// pair without '=' an empty value, '+' and percent escapes decoded. Where
// ParseForm drops a pair and reports an error (a bad escape, or a raw ';',
// which it once read as a separator), the body is refused: a fingerprint
// that kept such a pair would tell apart, or confuse, requests that the
// handler reads otherwise. It stops once sc's context is done, looking at
// it every checkEvery bytes, and counts the bytes it reads.
func formPairs(dst []formPair, body []byte, sc *scanner) ([]formPair, error) {
	rest := string(body)
	for next := 0; rest != ""; {
		if read := len(body) - len(rest); read >= next {
			if err := sc.ended(); err != nil {
				return dst, err
			}
			next = read + checkEvery
		}
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		work.Add(len(pair) + 1)
		if pair == "" {
			continue
		}
		if strings.IndexByte(pair, ';') >= 0 {
			return dst, fmt.Errorf("%w: form has a raw ';', which net/http drops with its pair", ErrBody)
		}
		rawName, rawValue, _ := strings.Cut(pair, "=")
		name, err := formUnescape(rawName)
		if err != nil {
			return dst, err
		}
		value, err := formUnescape(rawValue)
		if err != nil {
			return dst, err
		}
		segs, appendTo, err := splitFormName(name)
		if err != nil {
			return dst, err
		}
		dst = append(dst, formPair{name, value, segs, appendTo})
	}
	return dst, nil
}

// formJSON appends to dst a JSON document with the same content as the
// form's pairs: the nesting a[b][c]=v becomes objects, a[]=x and a[0]=x
// become arrays, a repeated name becomes an array of its values in their
// order, and every value is a string. The caller canonicalizes the result,
// which sorts the keys. The tree is how a body key is looked up, and its
// refusals (a name with two shapes) apply to every form; fingerprints read
// the pairs themselves (appendFormValues).
// It counts the name parts walked and the indices compared.
func formJSON(dst []byte, pairs []formPair) ([]byte, error) {
	root := &formNode{}
	for _, p := range pairs {
		work.Add(len(p.segs))
		if err := root.insert(p); err != nil {
			return dst, err
		}
	}
	return root.appendJSON(dst, true), nil
}

// formUnescape decodes '+' and percent escapes. A bad escape or a result
// that is not UTF-8 makes the body unparseable, as it would for JSON.
func formUnescape(s string) (string, error) {
	if !strings.ContainsAny(s, "%+") {
		if !utf8.ValidString(s) {
			return "", fmt.Errorf("%w: form field is not valid UTF-8", ErrBody)
		}
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			b = append(b, ' ')
		case '%':
			if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
				return "", fmt.Errorf("%w: form has a bad percent escape", ErrBody)
			}
			b = append(b, byte(unhex(s[i+1])<<4|unhex(s[i+2])))
			i += 2
		default:
			b = append(b, c)
		}
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%w: form field is not valid UTF-8", ErrBody)
	}
	return string(b), nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// splitFormName splits "a[b][c]" into a, b, c and reports a final "[]".
// A name that does not have that exact shape ("a[b", "a]", "[a]") is one
// literal name, brackets and all. A name nested deeper than a JSON body may
// be is refused before any part of it is kept: a name of a million
// brackets would otherwise become a tree a million levels deep, built and
// written out recursively, only to be refused by the JSON scanner.
func splitFormName(name string) (segs []string, appendTo bool, err error) {
	open := strings.IndexByte(name, '[')
	if open <= 0 || !strings.HasSuffix(name, "]") {
		return []string{name}, false, nil
	}
	// Each part is one level of the JSON tree, a final "[]" the array.
	levels := 1
	for rest := name[open:]; rest != ""; levels++ {
		end := strings.IndexByte(rest, ']')
		if rest[0] != '[' || end < 0 || strings.IndexByte(rest[1:end], '[') >= 0 {
			return []string{name}, false, nil
		}
		rest = rest[end+1:]
	}
	if levels > maxDepth {
		return nil, false, fmt.Errorf("%w: form field name nests deeper than %d levels", ErrBody, maxDepth)
	}
	segs = make([]string, 1, levels)
	segs[0] = name[:open]
	for rest := name[open:]; rest != ""; {
		end := strings.IndexByte(rest, ']')
		segs = append(segs, rest[1:end])
		rest = rest[end+1:]
	}
	if segs[len(segs)-1] == "" {
		return segs[:len(segs)-1], true, nil
	}
	return segs, false, nil
}

func (n *formNode) insert(p formPair) error {
	segs, appendTo, value := p.segs, p.appendTo, p.value
	cur := n
	for i, s := range segs {
		if s == "" && i > 0 {
			// a[][b]=1: which element b belongs to depends on the order of
			// the pairs, and a fingerprint must not.
			return fmt.Errorf("%w: form field name uses [] before its last part; use indices such as a[0][b]", ErrBody)
		}
		if len(cur.values) > 0 || len(cur.appended) > 0 {
			return fmt.Errorf("%w: form field is used both as a value and as an object", ErrBody)
		}
		next := cur.children[s]
		if next == nil {
			if cur.children == nil {
				cur.children = make(map[string]*formNode)
			}
			next = &formNode{}
			cur.children[s] = next
			cur.names = append(cur.names, s)
		}
		cur = next
	}
	switch {
	case len(cur.children) > 0:
		return fmt.Errorf("%w: form field is used both as a value and as an object", ErrBody)
	case appendTo && len(cur.values) > 0, !appendTo && len(cur.appended) > 0:
		return fmt.Errorf("%w: form field is sent both with and without []", ErrBody)
	case appendTo:
		cur.appended = append(cur.appended, value)
	default:
		cur.values = append(cur.values, value)
	}
	return nil
}

// index reports whether s is an array index as Stripe-style forms write
// them: 0 or a decimal without leading zeros.
func index(s string) (int, bool) {
	if s == "" || len(s) > 9 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0
}

func (n *formNode) appendJSON(dst []byte, root bool) []byte {
	switch {
	case len(n.values) == 1:
		return appendString(dst, n.values[0])
	case len(n.values) > 1:
		return appendStrings(dst, n.values)
	case len(n.appended) > 0:
		return appendStrings(dst, n.appended)
	}
	if !root && len(n.names) > 0 && allIndices(n.names) {
		// a[0]=x&a[1]=y is the array [x, y], ordered by index whatever the
		// order of the pairs; gaps in the indices close up.
		names := slices.Clone(n.names)
		slices.SortFunc(names, func(a, b string) int {
			work.Add(1)
			ia, _ := index(a)
			ib, _ := index(b)
			return ia - ib
		})
		dst = append(dst, '[')
		for i, name := range names {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = n.children[name].appendJSON(dst, false)
		}
		return append(dst, ']')
	}
	dst = append(dst, '{')
	for i, name := range n.names {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, name)
		dst = append(dst, ':')
		dst = n.children[name].appendJSON(dst, false)
	}
	return append(dst, '}')
}

func allIndices(names []string) bool {
	for _, s := range names {
		if _, ok := index(s); !ok {
			return false
		}
	}
	return true
}

func appendStrings(dst []byte, vs []string) []byte {
	dst = append(dst, '[')
	for i, v := range vs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, v)
	}
	return append(dst, ']')
}

// formName is the name a form gives the member that tokens point to:
// /card/number is card[number].
func formName(tokens []string) string {
	var b strings.Builder
	for i, t := range tokens {
		if i == 0 {
			b.WriteString(t)
			continue
		}
		b.WriteByte('[')
		b.WriteString(t)
		b.WriteByte(']')
	}
	return b.String()
}

// within reports whether a pair named name may be read as part of the
// member called field: the member itself, or any name that starts with it
// and a '['. That is wider than the names that nest below it (a[1]x=y is
// one literal name), because readers are not all strict: oapi-codegen's
// BindForm sizes the slice a from every name that starts with a[ and an
// index, a[1]x among them.
func within(name, field string) bool {
	return strings.HasPrefix(name, field) && (len(name) == len(field) || name[len(field)] == '[')
}

// sortFormPairs puts pairs in the order appendFormValues reads them:
// stably by name, so that the values of one name keep their order. It
// counts the names compared.
func sortFormPairs(pairs []formPair) {
	slices.SortStableFunc(pairs, func(a, b formPair) int {
		work.Add(1)
		return strings.Compare(a.name, b.name)
	})
}

// appendFormValues appends the pairs, sorted by sortFormPairs, that keep
// returns true for, as net/http's url.Values holds them: names in byte
// order, each with its values in the order they came. Every part is
// length-prefixed. Two forms get the same bytes exactly when ParseForm
// gives them the same values, so the fingerprint is as fine as the finest
// reader a server may use, and every reader built on those values
// (oapi-codegen's BindForm, a handler's r.PostForm) decodes requests with
// one fingerprint alike.
func appendFormValues(dst []byte, pairs []formPair, keep func(*formPair) bool) []byte {
	for i := 0; i < len(pairs); {
		j := i + 1
		for j < len(pairs) && pairs[j].name == pairs[i].name {
			j++
		}
		if keep(&pairs[i]) {
			dst = appendLen(dst, pairs[i].name)
			dst = append(dst, ' ')
			dst = strconv.AppendInt(dst, int64(j-i), 10)
			for _, p := range pairs[i:j] {
				dst = append(dst, ' ')
				dst = appendLen(dst, p.value)
			}
			dst = append(dst, ';')
		}
		i = j
	}
	return dst
}
