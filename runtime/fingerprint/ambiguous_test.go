package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// A body that encoding/json would read differently from the fingerprint
// (a member that matches a fingerprinted field only without regard to case,
// or two members one struct field would take in turn) is refused.
func TestAmbiguousBodies(t *testing.T) {
	selected := ambiguousSpec
	tests := []struct {
		name  string
		spec  Spec
		mt    string
		body  string
		wantE bool // refused as ambiguous
	}{
		{"issue example", selected, jsonType, `{"amount":100,"AMOUNT":5}`, true},
		{"case variant before the field", selected, jsonType, `{"AMOUNT":5,"amount":100}`, true},
		{"case variant alone", selected, jsonType, `{"Amount":5}`, true},
		{"two case variants", selected, jsonType, `{"AMOUNT":5,"Amount":6}`, true},
		{"escaped case variant", selected, jsonType, `{"amount":1,"\u0041mount":2}`, true},
		{"kelvin sign", selected, jsonType, `{"kind":"a","\u212aind":"b"}`, true},
		{"kelvin sign alone", selected, jsonType, "{\"\u212aIND\":\"b\"}", true},
		{"long s", selected, jsonType, "{\"\u017fku\":\"x\"}", true},
		{"nested level", selected, jsonType, `{"source":{"card":{"number":"1","NUMBER":"2"}}}`, true},
		{"middle level", selected, jsonType, `{"source":{"Card":{"number":"2"}}}`, true},
		{"top of a nested field", selected, jsonType, `{"SOURCE":{}}`, true},
		{"inside a selected object", selected, jsonType, `{"meta":{"k":1,"K":2}}`, true},
		{"deep inside a selected object", selected, jsonType, `{"meta":{"a":{"b":[{"x":1,"X":2}]}}}`, true},
		{"inside a selected array", selected, jsonType, "{\"items\":[{\"s\":1},{\"s\":1,\"\u017f\":2}]}", true},
		// Form readers (url.Values, oapi-codegen's BindForm) match names
		// exactly, so a form has no case variants to refuse: its names
		// are fingerprinted as sent (TestFormReaders).
		{"form case variant", selected, formType, `amount=1&AMOUNT=5`, false},
		{"form nested case variant", selected, formType, `source[card][Number]=1`, false},

		{"case variants elsewhere", selected, jsonType, `{"amount":1,"memo":"x","MEMO":"y"}`, false},
		{"case variants in an unselected object", selected, jsonType, `{"amount":1,"other":{"x":1,"X":2}}`, false},
		{"case variants under a selected scalar's sibling", selected, jsonType, `{"source":{"card":{"number":"1"},"x":{"a":1,"A":2}}}`, false},
		{"longer name", selected, jsonType, `{"amount":1,"amounts":2,"amoun":3}`, false},
		{"plain", selected, jsonType, `{"amount":1,"kind":"k","sku":"s","source":{"card":{"number":"1"}},"meta":{"k":1},"items":[{"s":1}]}`, false},
		{"selected object with distinct names", selected, jsonType, `{"meta":{"a":1,"b":{"c":[1,{"C1":2,"c2":3}]}}}`, false},

		{"whole body", Spec{}, jsonType, `{"a":1,"A":2}`, true},
		{"whole body nested", Spec{}, jsonType, `{"x":[{"k":1,"\u212a":2}]}`, true},
		{"whole body not adjacent in key order", Spec{}, jsonType, `{"AB":1,"Aa":2,"ab":3}`, true},
		{"whole body after an empty object", Spec{}, jsonType, `{"A":1,"x":{},"a":2}`, true},
		{"whole body after a nested object", Spec{}, jsonType, `{"A":1,"x":{"y":1},"a":2}`, true},
		{"whole body escaped", Spec{}, jsonType, `{"\u0041":1,"a":2}`, true},
		{"whole body many members", Spec{}, jsonType, `{` + manyMembers(40) + `,"MA0":0}`, true},
		{"whole body form", Spec{}, formType, `a=1&A=2`, false},
		{"whole body with exclude", Spec{Exclude: "/k"}, jsonType, `{"k":"x","a":{"s":1,"S":2}}`, true},
		{"whole body distinct", Spec{}, jsonType, `{"a":1,"b":{"c":2,"d":[{"e":3}]},"AB":1,"Aa":2}`, false},
		{"whole body many distinct members", Spec{}, jsonType, `{` + manyMembers(40) + `}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCompile(t, tt.spec)
			_, err := c.Sum(Input{MediaType: tt.mt, Body: []byte(tt.body)})
			switch {
			case tt.wantE && (!errors.Is(err, ErrBody) || !strings.Contains(err.Error(), "differ only in case")):
				t.Errorf("Sum(%s) error = %v, want an ambiguous-body ErrBody", tt.body, err)
			case !tt.wantE && err != nil:
				t.Errorf("Sum(%s) error = %v, want none", tt.body, err)
			}
			// SumLookup reads the same parse and must refuse alike.
			_, _, _, lerr := c.SumLookup(Input{MediaType: tt.mt, Body: []byte(tt.body)}, "/k")
			if (lerr != nil) != (err != nil) {
				t.Errorf("SumLookup error %v, Sum error %v", lerr, err)
			}
		})
	}
}

// The members a body-carried key's pointer passes through are held to the
// fingerprinted fields' rule: a member that encoding/json would read as
// the key, or as an object on the way to it, is refused, by Lookup and
// SumLookup alike, whatever the fingerprint reads. Forms match names
// exactly.
func TestAmbiguousKeyMember(t *testing.T) {
	const ptr = "/meta/idempotency_key"
	tests := []struct {
		name, mt, body string
		wantE          bool
	}{
		{"case variant after the key", jsonType, `{"meta":{"idempotency_key":"k1","IDEMPOTENCY_KEY":"k2"}}`, true},
		{"case variant before the key", jsonType, `{"meta":{"Idempotency_Key":"k2","idempotency_key":"k1"}}`, true},
		{"kelvin sign alone", jsonType, `{"meta":{"idempotency_\u212aey":"k1"}}`, true},
		{"case variant on the way", jsonType, `{"meta":{"idempotency_key":"k1"},"Meta":{"idempotency_key":"k2"}}`, true},
		{"case variant of the object alone", jsonType, `{"META":{"idempotency_key":"k2"}}`, true},
		{"exact key", jsonType, `{"meta":{"idempotency_key":"k1","other":1,"OTHER":2},"x":1,"X":2}`, false},
		{"no key", jsonType, `{"meta":{"idempotency_keys":"k1"},"metas":{}}`, false},
		{"key below an array", jsonType, `{"meta":[{"IDEMPOTENCY_KEY":"k1"}]}`, false},
		{"form", formType, `meta[idempotency_key]=k1&meta[IDEMPOTENCY_KEY]=k2&META[idempotency_key]=k3`, false},
	}
	for _, spec := range []Spec{ambiguousSpec, {}, {Exclude: ptr}} {
		c := mustCompile(t, spec)
		for _, tt := range tests {
			in := Input{MediaType: tt.mt, Body: []byte(tt.body)}
			_, _, _, err := c.SumLookup(in, ptr)
			_, _, lerr := Lookup(tt.mt, in.Body, ptr)
			if _, sumErr := c.Sum(in); sumErr != nil {
				continue // refused for the fingerprint's sake (TestAmbiguousBodies)
			}
			for _, err := range []error{err, lerr} {
				switch {
				case tt.wantE && (!errors.Is(err, ErrBody) || !strings.Contains(err.Error(), "differ only in case")):
					t.Errorf("%+v, %s: error %v, want an ambiguous-body ErrBody", spec, tt.name, err)
				case !tt.wantE && err != nil:
					t.Errorf("%+v, %s: error %v, want none", spec, tt.name, err)
				}
			}
		}
	}
}

// manyMembers returns n members "m0":0 ... spelled with a lower-case m, so
// that an object holding them takes the path for large objects.
func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"m` + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('0'+i/26)) + `":0`)
	}
	return b.String()
}

// A form name nested far deeper than any JSON body may be is refused while
// the form is parsed, before it is built into a tree.
func TestDeepFormRefused(t *testing.T) {
	var b strings.Builder
	b.WriteByte('a')
	for b.Len() < 1<<20 {
		b.WriteString("[b]")
	}
	b.WriteString("=1")
	body := []byte(b.String())
	c := mustCompile(t, Spec{})
	start := time.Now()
	_, err := c.Sum(Input{MediaType: formType, Body: body})
	t.Logf("%d-byte form refused in %v", len(body), time.Since(start))
	if !errors.Is(err, ErrBody) || !strings.Contains(err.Error(), "form field name nests deeper than") {
		t.Fatalf("deep form: error %v, want ErrBody from the form parser", err)
	}

	// The bound is JSON's: exactly maxDepth levels are fine.
	name := "a" + strings.Repeat("[b]", maxDepth-1)
	if _, err := c.Sum(Input{MediaType: formType, Body: []byte(name + "=1")}); err != nil {
		t.Errorf("form nested %d levels: %v", maxDepth, err)
	}
	if _, err := c.Sum(Input{MediaType: formType, Body: []byte(name + "[b]=1")}); !errors.Is(err, ErrBody) {
		t.Errorf("form nested %d levels: %v, want ErrBody", maxDepth+1, err)
	}
	// A name that is not of the a[b][c] shape stays one literal name,
	// however many brackets it holds.
	literal := name + "[b]x=1"
	if _, err := c.Sum(Input{MediaType: formType, Body: []byte(literal)}); err != nil {
		t.Errorf("literal name with many brackets: %v", err)
	}
}

// ambiguousSpec fingerprints fields whose names have case variants that
// encoding/json matches: plain ASCII, the Kelvin sign (k), the long s (s),
// members reached through objects and whole objects and arrays.
var ambiguousSpec = Spec{Body: []Field{
	{Pointer: "/amount", Type: Integer},
	{Pointer: "/items", Type: Array},
	{Pointer: "/kind", Type: String},
	{Pointer: "/meta", Type: Object},
	{Pointer: "/sku", Type: String},
	{Pointer: "/source/card/number", Type: String},
}}

// ambiguousTarget is what a handler decodes a body of ambiguousSpec into,
// with a few members the spec does not fingerprint.
type ambiguousTarget struct {
	Amount any           `json:"amount"`
	Items  []targetItem  `json:"items"`
	Kind   any           `json:"kind"`
	Meta   *targetMeta   `json:"meta"`
	Sku    any           `json:"sku"`
	Source *targetSource `json:"source"`
	X      any           `json:"x"`
	K      any           `json:"k"`
	S      any           `json:"s"`
}

type targetItem struct {
	Sku any `json:"sku"`
	S   any `json:"s"`
}

type targetMeta struct {
	K any `json:"k"`
	S any `json:"s"`
	A any `json:"a"`
}

type targetSource struct {
	Card *struct {
		Number any `json:"number"`
	} `json:"card"`
}

// fingerprinted returns the values of a decoded target that ambiguousSpec
// fingerprints, as one JSON document; whole adds every other member.
func (a *ambiguousTarget) fingerprinted(whole bool) []byte {
	var number any
	if a.Source != nil && a.Source.Card != nil {
		number = a.Source.Card.Number
	}
	v := []any{a.Amount, a.Items, a.Kind, a.Meta, a.Sku, number}
	if whole {
		v = append(v, a.Source != nil, a.Source != nil && a.Source.Card != nil, a.X, a.K, a.S)
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// rawTarget receives the raw bytes of every field ambiguousSpec
// fingerprints, to compare with the fingerprint's own values.
type rawTarget struct {
	Amount json.RawMessage `json:"amount"`
	Items  json.RawMessage `json:"items"`
	Kind   json.RawMessage `json:"kind"`
	Meta   json.RawMessage `json:"meta"`
	Sku    json.RawMessage `json:"sku"`
	Source *struct {
		Card *struct {
			Number json.RawMessage `json:"number"`
		} `json:"card"`
	} `json:"source"`
}

func (r *rawTarget) values() map[string]json.RawMessage {
	m := map[string]json.RawMessage{
		"/amount": r.Amount, "/items": r.Items, "/kind": r.Kind, "/meta": r.Meta, "/sku": r.Sku,
	}
	if r.Source != nil && r.Source.Card != nil {
		m["/source/card/number"] = r.Source.Card.Number
	}
	return m
}

// fieldValues reads the field lines of a canonical form: pointer to value,
// missing fields left out.
func fieldValues(t *testing.T, canon []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for line := range strings.SplitSeq(string(canon), "\n") {
		rest, ok := strings.CutPrefix(line, "field ")
		if !ok {
			continue
		}
		ptr, rest := cutLen(t, rest)
		rest = strings.TrimPrefix(rest, " ")
		if rest == "-" {
			continue
		}
		val, _ := cutLen(t, rest)
		out[ptr] = val
	}
	return out
}

func cutLen(t *testing.T, s string) (string, string) {
	n, rest, ok := strings.Cut(s, ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l > len(rest) {
		t.Fatalf("bad length prefix in %q", s)
	}
	return rest[:l], rest[l:]
}

// FuzzAmbiguousJSON checks, for JSON objects and variants of them (members
// reordered, dropped, renamed to or joined by a case variant), that a body
// is either refused or read by encoding/json as the fingerprint reads it:
// the raw value each fingerprinted field decodes from is the fingerprinted
// value, and two bodies with one fingerprint decode to the same values.
func FuzzAmbiguousJSON(f *testing.F) {
	for i, s := range []string{
		`{"amount":100,"AMOUNT":5}`,
		`{"Amount":5}`,
		`{"amount":1,"meta":{"k":1,"K":2}}`,
		`{"x":1,"X":2}`,
		`{"source":{"card":{"number":"1","Number":"2"}}}`,
		"{\"items\":[{\"s\":1,\"\u017f\":2}],\"kind\":\"a\"}",
		`{"kind":"a","\u212aind":"b"}`,
		`{"amount":1,"kind":"k","sku":"s","source":{"card":{"number":"1"},"t":"c"},"meta":{"k":1,"s":[1]},"items":[{"sku":"a","s":2}],"x":0,"k":{"a":1}}`,
		`{"k":"k1","K":"k2","amount":1}`,
		`{"\u212a":"k1","amount":1}`,
		`{"meta":{"k":"k1","\u212a":"k2"},"Meta":{"k":"k3"}}`,
	} {
		f.Add([]byte(s), uint64(i))
	}
	selected := mustCompile(f, ambiguousSpec)
	whole := mustCompile(f, Spec{})
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 0xa3b))
		variants := [][]byte{
			encodeOrdered(obj, func([]string) {}),
			encodeOrdered(obj, slices.Reverse[[]string]),
			encodeOrdered(obj, func(k []string) { rng.Shuffle(len(k), func(i, j int) { k[i], k[j] = k[j], k[i] }) }),
		}
		for _, change := range []func(map[string]any, string){
			func(m map[string]any, k string) { delete(m, k) },
			func(m map[string]any, k string) {
				if nk := caseVariant(k, rng); m[nk] == nil {
					m[nk] = m[k]
					delete(m, k)
				}
			},
			func(m map[string]any, k string) {
				if nk := caseVariant(k, rng); m[nk] == nil {
					m[nk] = json.Number(strconv.Itoa(rng.IntN(3)))
				}
			},
		} {
			c := deepCopy(obj).(map[string]any)
			if m, k := randomMember(c, rng); m != nil {
				change(m, k)
			}
			variants = append(variants, encodeOrdered(c, slices.Reverse[[]string]))
		}

		for _, c := range []*Compiled{selected, whole} {
			for _, body := range append([][]byte{data}, variants...) {
				keyAsDecoded(t, c, body)
			}
			sum, err := c.Sum(Input{MediaType: jsonType, Body: data})
			if err != nil {
				continue
			}
			if c == selected {
				var raw rawTarget
				canon, err := c.Canonical(nil, Input{MediaType: jsonType, Body: data})
				if err != nil {
					t.Fatal(err)
				}
				if json.Unmarshal(data, &raw) == nil {
					fp := fieldValues(t, canon)
					for ptr, r := range raw.values() {
						want, found := fp[ptr]
						if r == nil {
							if found {
								t.Fatalf("%s: encoding/json finds no %s, the fingerprint has %s", data, ptr, want)
							}
							continue
						}
						got, err := CanonicalJSON(nil, r)
						if err != nil || !found || string(got) != want {
							t.Fatalf("%s: encoding/json reads %s as %s, the fingerprint as %q (found %v)", data, ptr, got, want, found)
						}
					}
				}
			}
			for _, other := range variants {
				if s, err := c.Sum(Input{MediaType: jsonType, Body: other}); err != nil || s != sum {
					continue
				}
				var a, b ambiguousTarget
				if json.Unmarshal(data, &a) != nil || json.Unmarshal(other, &b) != nil {
					continue
				}
				if va, vb := a.fingerprinted(c == whole), b.fingerprinted(c == whole); !bytes.Equal(va, vb) {
					t.Fatalf("one fingerprint, two readings:\n%s -> %s\n%s -> %s", data, va, other, vb)
				}
			}
		}
	})
}

// keyTarget receives the raw bytes of the members that keyPointers name.
type keyTarget struct {
	K    json.RawMessage `json:"k"`
	Meta *struct {
		K json.RawMessage `json:"k"`
	} `json:"meta"`
}

// keyPointers are the key locations FuzzAmbiguousJSON reads.
var keyPointers = []string{"/k", "/meta/k"}

// keyAsDecoded checks that SumLookup either refuses body or reads the key
// at each of keyPointers as encoding/json decodes it: the same value, or
// none where encoding/json finds none.
func keyAsDecoded(t *testing.T, c *Compiled, body []byte) {
	t.Helper()
	var target keyTarget
	if json.Unmarshal(body, &target) != nil {
		return
	}
	decoded := map[string]json.RawMessage{"/k": target.K}
	if target.Meta != nil {
		decoded["/meta/k"] = target.Meta.K
	}
	for _, ptr := range keyPointers {
		_, v, found, err := c.SumLookup(Input{MediaType: jsonType, Body: body}, ptr)
		if err != nil {
			continue
		}
		raw := decoded[ptr]
		if raw == nil {
			if found {
				t.Fatalf("%s: encoding/json finds no %s, the key is read as %s", body, ptr, v)
			}
			continue
		}
		want, err := CanonicalJSON(nil, raw)
		if err != nil || !found || string(want) != string(v) {
			t.Fatalf("%s: encoding/json reads %s as %s, the key as %s (found %v)", body, ptr, want, v, found)
		}
	}
}

// encodeOrdered writes v as JSON with each object's members in the order
// that order leaves their sorted names in.
func encodeOrdered(v any, order func([]string)) []byte {
	var buf bytes.Buffer
	var write func(v any)
	write = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			keys := slices.Sorted(maps.Keys(x))
			order(keys)
			buf.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					buf.WriteByte(',')
				}
				kb, _ := json.Marshal(k)
				buf.Write(kb)
				buf.WriteByte(':')
				write(x[k])
			}
			buf.WriteByte('}')
		case []any:
			buf.WriteByte('[')
			for i, e := range x {
				if i > 0 {
					buf.WriteByte(',')
				}
				write(e)
			}
			buf.WriteByte(']')
		default:
			b, err := json.Marshal(x)
			if err != nil {
				panic(err)
			}
			buf.Write(b)
		}
	}
	write(v)
	return buf.Bytes()
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, e := range x {
			c[k] = deepCopy(e)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = deepCopy(e)
		}
		return c
	default:
		return v
	}
}

// randomMember picks one member of one object anywhere in v, or nil.
func randomMember(v any, rng *rand.Rand) (map[string]any, string) {
	var objs []map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) > 0 {
				objs = append(objs, x)
			}
			for _, k := range slices.Sorted(maps.Keys(x)) {
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	if len(objs) == 0 {
		return nil, ""
	}
	m := objs[rng.IntN(len(objs))]
	keys := slices.Sorted(maps.Keys(m))
	return m, keys[rng.IntN(len(keys))]
}

// caseVariant respells some letters of k in another case, the Kelvin sign
// and the long s included.
func caseVariant(k string, rng *rand.Rand) string {
	var b strings.Builder
	for _, r := range k {
		if rng.IntN(2) == 0 {
			b.WriteRune(r)
			continue
		}
		switch {
		case (r == 'k' || r == 'K') && rng.IntN(2) == 0:
			r = '\u212a'
		case (r == 's' || r == 'S') && rng.IntN(2) == 0:
			r = '\u017f'
		case unicode.IsUpper(r):
			r = unicode.ToLower(r)
		default:
			r = unicode.ToUpper(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Checking names for case costs no allocation once the scratch memory has
// grown, also for names with upper case letters and fingerprinted objects.
func TestCaseCheckDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; allocation counts are measured without it")
	}
	body := []byte(`{"fromAccount":"a","toAccount":"b","Amount":{"Value":1,"value2":2},"items":[{"Sku":"x","sku2":"y"}],"Memo":"m"}`)
	for name, spec := range map[string]Spec{
		"whole":    {},
		"selected": {Body: []Field{{Pointer: "/Amount"}, {Pointer: "/items"}, {Pointer: "/fromAccount"}}},
	} {
		c := mustCompile(t, spec)
		in := Input{MediaType: jsonType, Body: body}
		sumOf(t, c, in)
		if n := testing.AllocsPerRun(100, func() { _, _ = c.Sum(in) }); n != 0 {
			t.Errorf("%s: %v allocations per Sum", name, n)
		}
	}
}
