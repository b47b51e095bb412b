package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var jsonSeeds = []string{
	`{"amount":1000,"currency":"EUR","from_account":"a","to_account":"b","memo":"x"}`,
	`{"a":{"b":[1,2.5,{"c":null}],"d":"\u00e9\/\n"},"e":true,"f":false}`,
	`[1,-0,1e3,0.001,123456789012345678901234567890,1.5e-9]`,
	`"\ud83d\ude00 tab\t quote\" slash\\"`,
	`{"":0,"~":1,"a/b":{"x y":[[]]}}`,
	`9007199254740993`,
	`{"n":-12.50E+2,"s":"","o":{},"arr":[]}`,
	`{"a":{"k":1,"\u212a":2},"A":[{"s":1,"S":2}]}`,
	paymentBody,
}

// rejectedOnPurpose reports whether err is one of the places where this
// package is deliberately stricter than encoding/json.
func rejectedOnPurpose(err error) bool {
	msg := err.Error()
	for _, s := range []string{"duplicate key", "UTF-8", "surrogate", "exponent out of range", "nesting too deep"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func FuzzJSONReformat(f *testing.F) {
	for i, s := range jsonSeeds {
		f.Add([]byte(s), uint64(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		canon, err := CanonicalJSON(nil, data)
		if !json.Valid(data) {
			if err == nil {
				t.Fatalf("accepted invalid JSON %q as %s", data, canon)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrBody) || !rejectedOnPurpose(err) {
				t.Fatalf("rejected valid JSON %q: %v", data, err)
			}
			return
		}
		again, err := CanonicalJSON(nil, canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("canonical form is not a fixed point: %s -> %s, %v", canon, again, err)
		}

		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("encoding/json cannot decode %q: %v", data, err)
		}
		// A whole-body fingerprint refuses exactly the bodies with an object
		// whose member names differ only in case: compare with the plain
		// pairwise comparison of every object's names.
		whole := mustCompile(t, Spec{})
		if _, err := whole.Sum(Input{MediaType: jsonType, Body: data}); err != nil {
			if !errors.Is(err, ErrBody) || !strings.Contains(err.Error(), "differ only in case") {
				t.Fatalf("Sum(%q): %v", data, err)
			}
			if !hasCaseVariants(v) {
				t.Fatalf("Sum(%q) refused names that do not differ only in case: %v", data, err)
			}
			return
		}
		if hasCaseVariants(v) {
			t.Fatalf("Sum(%q) accepted names that differ only in case", data)
		}

		rng := rand.New(rand.NewPCG(seed, 0x1de))
		re := new(reencoder)
		re.rng = rng
		re.value(v, 0)
		if re.skip {
			return
		}
		other := re.buf.Bytes()

		sum := func(c *Compiled, body []byte) [32]byte {
			s, err := c.Sum(Input{MediaType: jsonType, Body: body})
			if err != nil {
				t.Fatalf("Sum(%q): %v", body, err)
			}
			return s
		}
		if sum(whole, data) != sum(whole, other) {
			c2, _ := CanonicalJSON(nil, other)
			t.Fatalf("reformatting changed the fingerprint:\n%s\n%s\ncanonical:\n%s\n%s", data, other, canon, c2)
		}
		var sel *Compiled
		if obj, ok := v.(map[string]any); ok && len(obj) > 0 {
			var fields []Field
			for k := range obj {
				if rng.IntN(2) == 0 || len(fields) == 0 {
					fields = append(fields, Field{Pointer: "/" + escapePointer(k)})
				}
			}
			sel = mustCompile(t, Spec{Body: fields})
			if sum(sel, data) != sum(sel, other) {
				t.Fatalf("reformatting changed the selected fingerprint:\n%s\n%s", data, other)
			}
		}

		// Change one scalar: the fingerprint must change with it.
		var leaves []leaf
		collectLeaves(v, "", &leaves)
		if len(leaves) == 0 {
			return
		}
		l := leaves[rng.IntN(len(leaves))]
		mutated := l.set(l.changed)
		re = &reencoder{rng: rng}
		re.value(mutated, 0)
		if re.skip {
			return
		}
		changed := re.buf.Bytes()
		if sum(whole, data) == sum(whole, changed) {
			t.Fatalf("changing %s to %v kept the fingerprint:\n%s\n%s", l.pointer, l.changed, data, changed)
		}
		if l.pointer != "" {
			top := l.pointer
			if i := strings.IndexByte(top[1:], '/'); i >= 0 {
				top = top[:i+1]
			}
			c := mustCompile(t, Spec{Body: []Field{{Pointer: top}}})
			if sum(c, data) == sum(c, changed) {
				t.Fatalf("changing %s kept the fingerprint of %s:\n%s\n%s", l.pointer, top, data, changed)
			}
		}
	})
}

// hasCaseVariants reports whether an object anywhere in v has two member
// names that strings.EqualFold, the folding encoding/json matches names
// with, takes for one.
func hasCaseVariants(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		keys := slices.Sorted(maps.Keys(x))
		for i, k := range keys {
			for _, l := range keys[:i] {
				if strings.EqualFold(k, l) {
					return true
				}
			}
			if hasCaseVariants(x[k]) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasCaseVariants(e) {
				return true
			}
		}
	}
	return false
}

func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// leaf is one scalar of a decoded document and a way to replace it.
type leaf struct {
	pointer string
	changed any
	set     func(any) any // returns the document with the leaf replaced
}

func collectLeaves(v any, ptr string, out *[]leaf) {
	root := func(x any) any { return x }
	collect(v, ptr, root, out)
}

func collect(v any, ptr string, replace func(any) any, out *[]leaf) {
	switch x := v.(type) {
	case map[string]any:
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range x {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			collect(x[k], ptr+"/"+escapePointer(k), func(nv any) any {
				c := make(map[string]any, len(x))
				for kk, vv := range x {
					c[kk] = vv
				}
				c[k] = nv
				return replace(c)
			}, out)
		}
	case []any:
		for i := range x {
			collect(x[i], ptr+"/"+strconv.Itoa(i), func(nv any) any {
				c := slices.Clone(x)
				c[i] = nv
				return replace(c)
			}, out)
		}
	default:
		*out = append(*out, leaf{pointer: ptr, changed: changeScalar(v), set: replace})
	}
}

// changeScalar returns a different value of the same kind. For a number it
// changes the last digit of the significand, which always changes the
// value (the value is significand × 10^exponent).
func changeScalar(v any) any {
	switch x := v.(type) {
	case string:
		return x + "x"
	case bool:
		return !x
	case json.Number:
		s := string(x)
		end := strings.IndexAny(s, "eE")
		if end < 0 {
			end = len(s)
		}
		d := s[end-1]
		nd := byte('1')
		if d != '0' {
			nd = '0'
		}
		return json.Number(s[:end-1] + string(nd) + s[end:])
	default:
		return false
	}
}

// reencoder writes a decoded document back with another spelling:
// shuffled keys, random whitespace, random string escapes and respelled
// numbers.
type reencoder struct {
	buf  bytes.Buffer
	rng  *rand.Rand
	skip bool // a number too odd to respell exactly
}

func (r *reencoder) ws() {
	for range r.rng.IntN(3) {
		r.buf.WriteByte(" \t\n\r"[r.rng.IntN(4)])
	}
}

func (r *reencoder) value(v any, depth int) {
	r.ws()
	switch x := v.(type) {
	case nil:
		r.buf.WriteString("null")
	case bool:
		r.buf.WriteString(strconv.FormatBool(x))
	case string:
		r.str(x)
	case json.Number:
		r.number(string(x))
	case []any:
		r.buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				r.buf.WriteByte(',')
			}
			r.value(e, depth+1)
		}
		r.ws()
		r.buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		r.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		r.buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				r.buf.WriteByte(',')
			}
			r.ws()
			r.str(k)
			r.ws()
			r.buf.WriteByte(':')
			r.value(x[k], depth+1)
		}
		r.ws()
		r.buf.WriteByte('}')
	default:
		panic(fmt.Sprintf("unexpected %T", v))
	}
	r.ws()
}

func (r *reencoder) str(s string) {
	r.buf.WriteByte('"')
	for _, c := range s {
		short := ""
		if i := strings.IndexRune("\"\\/\b\f\n\r\t", c); i >= 0 {
			short = `\` + string(`"\/bfnrt`[i])
		}
		raw := c >= 0x20 && c != '"' && c != '\\'
		switch choice := r.rng.IntN(3); {
		case choice == 0 && raw:
			r.buf.WriteRune(c)
		case choice == 1 && short != "":
			r.buf.WriteString(short)
		default:
			if c > 0xffff {
				c -= 0x10000
				fmt.Fprintf(&r.buf, `\u%04x\u%04X`, 0xd800+(c>>10), 0xdc00+(c&0x3ff))
			} else {
				fmt.Fprintf(&r.buf, `\u%04X`, c)
			}
		}
	}
	r.buf.WriteByte('"')
}

// number respells a JSON number with the same exact value.
func (r *reencoder) number(s string) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expPart, _ := strings.Cut(strings.ToLower(s), "e")
	exp := int64(0)
	if expPart != "" {
		var err error
		if exp, err = strconv.ParseInt(expPart, 10, 64); err != nil || exp > 1e9 || exp < -1e9 {
			r.skip = true
			return
		}
	}
	ip, fp, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(ip+fp, "0")
	e := exp - int64(len(fp))
	if neg && r.rng.IntN(2) == 0 || neg && digits != "" {
		r.buf.WriteByte('-')
	}
	if digits == "" {
		r.buf.WriteString([]string{"0", "0.0", "0e5", "0.000E-3"}[r.rng.IntN(4)])
		return
	}
	expChar := []string{"e", "E", "e+", "E+"}[r.rng.IntN(4)]
	writeExp := func(x int64) {
		if x < 0 {
			fmt.Fprintf(&r.buf, "%s%d", expChar[:1], x)
			return
		}
		fmt.Fprintf(&r.buf, "%s%d", expChar, x)
	}
	zeros := strings.Repeat("0", r.rng.IntN(3))
	switch r.rng.IntN(3) {
	case 0:
		r.buf.WriteString("0." + digits + zeros)
		writeExp(e + int64(len(digits)))
	case 1:
		r.buf.WriteString(digits + zeros)
		writeExp(e - int64(len(zeros)))
	default:
		r.buf.WriteString(digits[:1] + "." + digits[1:] + zeros + "0")
		writeExp(e + int64(len(digits)) - 1)
	}
}

var formSeeds = []string{
	`amount=1000&currency=EUR&from_account=a&to_account=b`,
	`a[b][c]=1&a[b][d]=2&tags[]=x&tags[]=y&z=%41+b`,
	`items[0][sku]=A&items[1][sku]=B&items[0][n]=1`,
	`k=v&k=w&empty=&noeq&%5Bodd=1`,
	`name=J%C3%A9r%C3%B4me&memo=a%26b%3Dc`,
	`a=1&A=2&k[x]=1&%E2%84%AA[x]=2`,
	"a" + strings.Repeat("[b]", maxDepth) + "=1",
	"a" + strings.Repeat("[b]", maxDepth-2) + "[]=1&c=2",
}

func FuzzForm(f *testing.F) {
	for i, s := range formSeeds {
		f.Add(s, uint64(i))
	}
	f.Fuzz(func(t *testing.T, body string, seed uint64) {
		whole := mustCompile(t, Spec{})
		s1, err := whole.Sum(Input{MediaType: formType, Body: []byte(body)})
		if err != nil {
			if !errors.Is(err, ErrBody) {
				t.Fatalf("Sum(%q): %v, want ErrBody", body, err)
			}
			return
		}
		type pair struct{ name, value string }
		var pairs []pair
		for p := range strings.SplitSeq(body, "&") {
			if p == "" {
				continue
			}
			n, v, _ := strings.Cut(p, "=")
			dn, err1 := url.QueryUnescape(n)
			dv, err2 := url.QueryUnescape(v)
			if err1 != nil || err2 != nil || !utf8.ValidString(dn) || !utf8.ValidString(dv) {
				t.Fatalf("form %q accepted but pair %q does not decode", body, p)
			}
			pairs = append(pairs, pair{dn, dv})
		}
		// Reorder the pairs (keeping the order of pairs that share a name)
		// and spell every escape the other way.
		rng := rand.New(rand.NewPCG(seed, 0xf04))
		rank := map[string]int{}
		for _, p := range pairs {
			if _, ok := rank[p.name]; !ok {
				rank[p.name] = rng.Int()
			}
		}
		slices.SortStableFunc(pairs, func(a, b pair) int { return rank[a.name] - rank[b.name] })
		var parts []string
		for _, p := range pairs {
			parts = append(parts, url.QueryEscape(p.name)+"="+url.QueryEscape(p.value))
		}
		other := strings.Join(parts, "&")
		if other == "" && body != "" {
			// A body of only separators has no pairs but is not an empty
			// body, which would mean "no body".
			other = "&&"
		}
		s2, err := whole.Sum(Input{MediaType: formType, Body: []byte(other)})
		if err != nil || s1 != s2 {
			t.Fatalf("reordering changed the fingerprint (%v):\n%q\n%q", err, body, other)
		}
		// Typed selection of every top-level name, same property.
		var fields []Field
		seen := map[string]bool{}
		for _, p := range pairs {
			top, _, err := splitFormName(p.name)
			if err != nil {
				t.Fatalf("form %q accepted but name %q refused: %v", body, p.name, err)
			}
			if !seen[top[0]] {
				seen[top[0]] = true
				fields = append(fields, Field{Pointer: "/" + escapePointer(top[0]), Type: Type(rng.IntN(int(Array) + 1))})
			}
		}
		typed := mustCompile(t, Spec{Body: fields})
		t1, err1 := typed.Sum(Input{MediaType: formType, Body: []byte(body)})
		t2, err2 := typed.Sum(Input{MediaType: formType, Body: []byte(other)})
		if err1 != nil || err2 != nil || t1 != t2 {
			t.Fatalf("reordering changed the typed fingerprint (%v, %v):\n%q\n%q", err1, err2, body, other)
		}
	})
}
