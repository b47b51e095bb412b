package fingerprint

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

const (
	jsonType = "application/json"
	formType = "application/x-www-form-urlencoded"
)

func mustCompile(t testing.TB, spec Spec) *Compiled {
	t.Helper()
	c, err := Compile(spec)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", spec, err)
	}
	return c
}

func sumOf(t testing.TB, c *Compiled, in Input) [32]byte {
	t.Helper()
	s, err := c.Sum(in)
	if err != nil {
		t.Fatalf("Sum(%q): %v", in.Body, err)
	}
	return s
}

func canonicalOf(t testing.TB, c *Compiled, in Input) string {
	t.Helper()
	b, err := c.Canonical(nil, in)
	if err != nil {
		t.Fatalf("Canonical(%q): %v", in.Body, err)
	}
	return string(b)
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" {\n\t\"a\" : [ 1 , 2 ] \r\n} ", `{"a":[1,2]}`},
		{`"\u00e9\/\"\\\b\f\n\r\t\u0001\u001F"`, `"é/\"\\\b\f\n\r\t\u0001\u001f"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`{"\u0062":1,"a":{"d":[],"c":{}}}`, `{"a":{"c":{},"d":[]},"b":1}`},
		{`[true,false,null]`, `[true,false,null]`},
		{`"é😀"`, `"é😀"`},
		{`"\u2028"`, "\"\u2028\""},
	}
	for _, tt := range tests {
		got, err := CanonicalJSON(nil, []byte(tt.in))
		if err != nil {
			t.Errorf("CanonicalJSON(%q): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("CanonicalJSON(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestCanonicalNumbers(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0", "0"},
		{"-0", "0"},
		{"-0.0e5", "0"},
		{"0.000", "0"},
		{"1", "1"},
		{"1.0", "1"},
		{"1e0", "1"},
		{"10E-1", "1"},
		{"0.1e1", "1"},
		{"1E+2", "100"},
		{"1000", "1000"},
		{"1e3", "1000"},
		{"-12.50", "-12.5"},
		{"0.001", "0.001"},
		{"1e-6", "0.000001"},
		{"1e-7", "1e-7"},
		{"15e-8", "1.5e-7"},
		{"123456789012345678901", "123456789012345678901"},
		{"1234567890123456789012", "1.234567890123456789012e+21"},
		{"1e21", "1e+21"},
		{"1e20", "100000000000000000000"},
		{"9007199254740993", "9007199254740993"},
		{"9007199254740993.000", "9007199254740993"},
		{"0.30000000000000000001", "0.30000000000000000001"},
		{"120e-3", "0.12"},
		{"1200.00e-2", "12"},
		{"-5e-1", "-0.5"},
		{"00", ""}, // not JSON
		{"1.", ""},
		{".5", ""},
		{"+1", ""},
		{"1e", ""},
		{"1e+", ""},
		{"-", ""},
		{"1e99999999999999999999", ""}, // exponent out of range
	}
	for _, tt := range tests {
		got, err := CanonicalJSON(nil, []byte(tt.in))
		if tt.want == "" {
			if !errors.Is(err, ErrBody) {
				t.Errorf("CanonicalJSON(%s) = %s, %v; want ErrBody", tt.in, got, err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

func TestMalformedJSON(t *testing.T) {
	tests := []string{
		`{"a":1,"a":2}`,
		`{"a":1,"\u0061":2}`,
		`{"b":1,"a":1,"b":2}`, // duplicate found only after sorting
		`{"x":{"a":1,"a":1}}`,
		"\"\xff\"",
		"\"\xed\xa0\x80\"", // UTF-8 encoded surrogate
		`"\ud800"`,
		`"\udc00"`,
		`"\ud800\u0041"`,
		"\"a\x01\"",
		`"\x"`,
		`"\u12"`,
		`"abc`,
		`{"a":1}x`,
		`{"a":1,}`,
		`[1,]`,
		`{"a" 1}`,
		`{a:1}`,
		`01`,
		`tru`,
		`nul`,
		`[`,
		` `,
		"\xef\xbb\xbf{}", // byte order mark
		strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	}
	for _, in := range tests {
		got, err := CanonicalJSON(nil, []byte(in))
		if !errors.Is(err, ErrBody) {
			t.Errorf("CanonicalJSON(%q) = %s, %v; want ErrBody", in, got, err)
		}
	}
	// The depth limit is a limit, not an off-by-one.
	deep := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if _, err := CanonicalJSON(nil, []byte(deep)); err != nil {
		t.Errorf("nesting of exactly %d: %v", maxDepth, err)
	}
}

// pair is two request bodies that must (same) or must not have one
// fingerprint under spec.
type pair struct {
	name string
	spec Spec
	mt   string // both bodies, unless mt2 is set
	a, b string
	mt2  string
	same bool
}

func checkPairs(t *testing.T, pairs []pair) {
	t.Helper()
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			c := mustCompile(t, p.spec)
			mt2 := p.mt2
			if mt2 == "" {
				mt2 = p.mt
			}
			sa := sumOf(t, c, Input{MediaType: p.mt, Body: []byte(p.a)})
			sb := sumOf(t, c, Input{MediaType: mt2, Body: []byte(p.b)})
			if (sa == sb) != p.same {
				t.Errorf("same=%v, want %v\n a: %s\n b: %s",
					sa == sb, p.same,
					canonicalOf(t, c, Input{MediaType: p.mt, Body: []byte(p.a)}),
					canonicalOf(t, c, Input{MediaType: mt2, Body: []byte(p.b)}))
			}
		})
	}
}

var transfer = Spec{Body: []Field{
	{Pointer: "/amount", Type: Integer},
	{Pointer: "/currency", Type: String},
	{Pointer: "/from_account", Type: String},
	{Pointer: "/to_account", Type: String},
}}

func TestJSONWholeBody(t *testing.T) {
	whole := Spec{}
	checkPairs(t, []pair{
		{"key order", whole, jsonType, `{"a":1,"b":2}`, `{"b":2,"a":1}`, "", true},
		{"whitespace", whole, jsonType, `{"a":[1,2]}`, "{ \"a\" :\n[ 1,\t2 ] }", "", true},
		{"unicode escape", whole, jsonType, `{"s":"\u00e9"}`, `{"s":"é"}`, "", true},
		{"escaped slash", whole, jsonType, `{"s":"a\/b"}`, `{"s":"a/b"}`, "", true},
		{"escaped key", whole, jsonType, `{"\u0061":1}`, `{"a":1}`, "", true},
		{"1 and 1.0", whole, jsonType, `{"n":1}`, `{"n":1.0}`, "", true},
		{"1 and 1e0", whole, jsonType, `{"n":1}`, `{"n":1e0}`, "", true},
		{"1 and 10E-1", whole, jsonType, `{"n":1}`, `{"n":10E-1}`, "", true},
		{"1 and 0.1e1", whole, jsonType, `{"n":1}`, `{"n":0.1e1}`, "", true},
		{"-0 and 0", whole, jsonType, `{"n":-0}`, `{"n":0}`, "", true},
		{"media type suffix", whole, "application/merge-patch+json", `{"a":1}`, `{"a":1}`, jsonType, true},
		{"media type case", whole, "Application/JSON", `{"a":1}`, `{"a":1}`, jsonType, true},

		{"2^53+1 and 2^53", whole, jsonType, `{"n":9007199254740993}`, `{"n":9007199254740992}`, "", false},
		{"0.1+0.2 precision", whole, jsonType, `{"n":0.30000000000000004}`, `{"n":0.3}`, "", false},
		{"missing and null", whole, jsonType, `{"a":1}`, `{"a":1,"b":null}`, "", false},
		{"array order", whole, jsonType, `{"a":[1,2]}`, `{"a":[2,1]}`, "", false},
		{"string and number", whole, jsonType, `{"a":"1"}`, `{"a":1}`, "", false},
		{"string and bool", whole, jsonType, `{"a":"true"}`, `{"a":true}`, "", false},
		{"value", whole, jsonType, `{"a":1}`, `{"a":2}`, "", false},
		{"nested value", whole, jsonType, `{"a":{"b":"x"}}`, `{"a":{"b":"y"}}`, "", false},
		{"empty body and {}", whole, jsonType, ``, `{}`, "", false},
		{"{} and []", whole, jsonType, `{}`, `[]`, "", false},
		{"empty string and null", whole, jsonType, `{"a":""}`, `{"a":null}`, "", false},
		{"key case", whole, jsonType, `{"a":1}`, `{"A":1}`, "", false},
	})
}

func TestJSONSelectedFields(t *testing.T) {
	base := `{"amount":1000,"currency":"EUR","from_account":"acc_1","to_account":"acc_2","memo":"rent"}`
	withArray := Spec{Body: []Field{{Pointer: "/items/0/sku", Type: String}, {Pointer: "/id", Type: String}}}
	nested := Spec{Body: []Field{{Pointer: "/source/card/number", Type: String}, {Pointer: "/source", Type: Object}}}
	escaped := Spec{Body: []Field{{Pointer: "/a~1b/c~0d", Type: String}}}
	checkPairs(t, []pair{
		{"unselected field ignored", transfer, jsonType, base, strings.Replace(base, "rent", "groceries", 1), "", true},
		{"unselected field dropped", transfer, jsonType, base, strings.Replace(base, `,"memo":"rent"`, "", 1), "", true},
		{"number spelling", transfer, jsonType, base, strings.Replace(base, "1000", "1e3", 1), "", true},
		{"reordered", transfer, jsonType, base, `{"memo":"rent","to_account":"acc_2","from_account":"acc_1","currency":"EUR","amount":1000.00}`, "", true},
		{"selected field changed", transfer, jsonType, base, strings.Replace(base, "1000", "1001", 1), "", false},
		{"selected field swapped", transfer, jsonType, base, `{"amount":1000,"currency":"EUR","from_account":"acc_2","to_account":"acc_1"}`, "", false},
		{"selected missing vs null", transfer, jsonType, `{"amount":1}`, `{"amount":1,"currency":null}`, "", false},
		{"selected missing vs empty", transfer, jsonType, `{"amount":1}`, `{"amount":1,"currency":""}`, "", false},
		{"empty body vs empty object", transfer, jsonType, ``, `{}`, "", true},
		{"root array taken whole", transfer, jsonType, ``, `[1]`, "", false},
		{"root scalar has no fields", transfer, jsonType, ``, `5`, "", true},
		{"through array takes the array", withArray, jsonType, `{"items":[{"sku":"a"},{"sku":"b"}]}`, `{"items":[{"sku":"a"},{"sku":"c"}]}`, "", false},
		{"through array reformatted", withArray, jsonType, `{"items":[{"sku":"a","n":1}]}`, `{"items":[{"n":1.0,"sku":"a"}]}`, "", true},
		{"through scalar is missing", withArray, jsonType, `{"items":5}`, `{}`, "", true},
		{"nested field", nested, jsonType, `{"source":{"card":{"number":"4242"}}}`, `{"source":{"card":{"number":"4243"}}}`, "", false},
		{"nested reordered", nested, jsonType, `{"x":1,"source":{"type":"card","card":{"number":"4242"}}}`, `{"source":{"card":{"number":"4242"},"type":"card"}}`, "", true},
		{"parent and child both selected", nested, jsonType, `{"source":{"type":"card"}}`, `{"source":{"type":"bank"}}`, "", false},
		{"pointer escapes", escaped, jsonType, `{"a/b":{"c~d":"x"}}`, `{"a/b":{"c~d":"y"}}`, "", false},
		{"pointer escapes ignore others", escaped, jsonType, `{"a/b":{"c~d":"x","e":1}}`, `{"a/b":{"c~d":"x","e":2}}`, "", true},
	})
}

func TestSelectedFieldValues(t *testing.T) {
	c := mustCompile(t, Spec{Body: []Field{
		{Pointer: "/items/0/sku"}, {Pointer: "/n"}, {Pointer: "/s"}, {Pointer: "/gone"},
	}})
	got := canonicalOf(t, c, Input{MediaType: jsonType, Body: []byte(`{"s":"\u00e9","n":1.50,"items":[{"sku":"a"}],"extra":true}`)})
	// Fields are listed in sorted order.
	want := Version + "\n" +
		"field 5:/gone -\n" +
		"field 12:/items/0/sku 13:[{\"sku\":\"a\"}]\n" +
		"field 2:/n 3:1.5\n" +
		"field 2:/s 4:\"é\"\n"
	if got != want {
		t.Errorf("canonical form:\n%s\nwant:\n%s", got, want)
	}
}

func TestSelectionValidatesWholeBody(t *testing.T) {
	c := mustCompile(t, transfer)
	for _, body := range []string{
		`{"amount":1,"memo":"x",}`,
		`{"amount":1,"memo":{"a":1,"a":2}}`,
		"{\"amount\":1,\"memo\":\"\xff\"}",
		`{"amount":1} trailing`,
		`not json`,
	} {
		if _, err := c.Sum(Input{MediaType: jsonType, Body: []byte(body)}); !errors.Is(err, ErrBody) {
			t.Errorf("Sum(%q) error = %v, want ErrBody", body, err)
		}
	}
}

func TestExclude(t *testing.T) {
	top := Spec{Exclude: "/idempotency_key"}
	nested := Spec{Exclude: "/meta/key"}
	checkPairs(t, []pair{
		{"key excluded", top, jsonType, `{"idempotency_key":"k1","a":1}`, `{"a":1,"idempotency_key":"k2"}`, "", true},
		{"key excluded last", top, jsonType, `{"a":1,"b":2,"idempotency_key":"k1"}`, `{"a":1,"b":2}`, "", true},
		{"key excluded only member", top, jsonType, `{"idempotency_key":"k1"}`, `{}`, "", true},
		{"rest still counts", top, jsonType, `{"idempotency_key":"k1","a":1}`, `{"idempotency_key":"k1","a":2}`, "", false},
		{"nested excluded", nested, jsonType, `{"meta":{"key":"k1","x":1},"a":1}`, `{"a":1,"meta":{"x":1,"key":"k2"}}`, "", true},
		{"nested sibling counts", nested, jsonType, `{"meta":{"key":"k1","x":1}}`, `{"meta":{"key":"k1","x":2}}`, "", false},
		{"form key excluded", top, formType, `idempotency_key=k1&a=1`, `a=1&idempotency_key=k2`, "", true},
		{"form nested key excluded", nested, formType, `meta[key]=k1&a=1`, `a=1&meta[key]=k2`, "", true},
	})
}

func TestForms(t *testing.T) {
	whole := Spec{}
	typed := Spec{Body: []Field{
		{Pointer: "/amount", Type: Integer},
		{Pointer: "/capture", Type: Boolean},
		{Pointer: "/note", Type: String},
		{Pointer: "/rate", Type: Number},
	}}
	nested := Spec{Body: []Field{{Pointer: "/card/number", Type: String}, {Pointer: "/tags", Type: Array}}}
	checkPairs(t, []pair{
		{"percent encoding", whole, formType, `a=%41`, `a=A`, "", true},
		{"percent in name", whole, formType, `%61=1`, `a=1`, "", true},
		{"plus is space", whole, formType, `a=x+y`, `a=x%20y`, "", true},
		{"field order", whole, formType, `a=1&b=2`, `b=2&a=1`, "", true},
		{"empty pairs", whole, formType, `a=1&&b=2&`, `a=1&b=2`, "", true},
		{"no = is empty value", whole, formType, `a`, `a=`, "", true},
		{"bracket nesting order", whole, formType, `a[b]=1&a[c]=2`, `a[c]=2&a[b]=1`, "", true},
		{"encoded brackets", whole, formType, `a%5Bb%5D=1`, `a[b]=1`, "", true},
		{"indexed array order", whole, formType, `a[1]=y&a[0]=x`, `a[0]=x&a[1]=y`, "", true},
		// net/http's ParseForm gives these different names.
		{"indexed is not appended", whole, formType, `a[0]=x&a[1]=y`, `a[]=x&a[]=y`, "", false},
		{"repeated is not appended", whole, formType, `a=x&a=y`, `a[]=x&a[]=y`, "", false},
		{"index gap stays", whole, formType, `a[1]=x`, `a[0]=x`, "", false},
		{"index gaps stay", whole, formType, `a[0]=x&a[2]=y`, `a[0]=x&a[1]=y`, "", false},
		{"index spelling stays", whole, formType, `a[01]=x`, `a[1]=x`, "", false},
		{"case is kept", whole, formType, `a=1&A=2`, `a=1`, "", false},
		{"repeated keeps order", whole, formType, `a=1&a=2`, `a=2&a=1`, "", false},
		{"appended keeps order", whole, formType, `a[]=1&a[]=2`, `a[]=2&a[]=1`, "", false},
		{"single vs appended", whole, formType, `a=1`, `a[]=1`, "", false},
		{"value changed", whole, formType, `a=1`, `a=2`, "", false},
		{"missing vs empty", whole, formType, `a=1`, `a=1&b=`, "", false},
		{"whole form keeps strings", whole, formType, `a=1000`, `a=1e3`, "", false},
		{"plus is not literal plus", whole, formType, `a=x+y`, `a=x%2By`, "", false},

		// A form value is read as the string it is (strconv.Atoi takes
		// 1000 and refuses 1e3): spellings are not folded together.
		{"typed integer spelling", typed, formType, `amount=1000`, `amount=1e3`, "", false},
		{"typed integer decimal", typed, formType, `amount=1000`, `amount=1000.0`, "", false},
		{"typed number", typed, formType, `rate=0.50`, `rate=5e-1`, "", false},
		{"typed integer other name", typed, formType, `amount=1000&AMOUNT=1`, `amount=1000`, "", true},
		{"typed integer differs", typed, formType, `amount=1000`, `amount=1001`, "", false},
		{"typed bad number stays string", typed, formType, `amount=12abc`, `amount=12abc`, "", true},
		{"typed bad number differs", typed, formType, `amount=12abc`, `amount=12`, "", false},
		{"typed boolean", typed, formType, `capture=true`, `capture=false`, "", false},
		{"typed string verbatim", typed, formType, `note=1e3`, `note=1000`, "", false},
		{"unselected ignored", typed, formType, `amount=1&memo=a`, `memo=b&amount=1`, "", true},
		{"form equals json", typed, formType, `amount=1000&capture=true&note=hi&rate=1.5`, `{"amount":1e3,"capture":true,"note":"hi","rate":1.50}`, jsonType, true},
		{"form string differs from json number", typed, formType, `note=5`, `{"note":5}`, jsonType, false},
		{"nested select", nested, formType, `card[number]=4242&card[cvc]=1`, `card[cvc]=2&card[number]=4242`, "", true},
		{"nested select differs", nested, formType, `card[number]=4242`, `card[number]=4243`, "", false},
		{"array select", nested, formType, `tags[]=a&tags[]=b`, `tags[]=a&tags[]=b&other=1`, "", true},
		{"array select spelling", nested, formType, `tags[]=a&tags[]=b`, `tags[0]=a&tags[1]=b`, "", false},
		{"array select gap", nested, formType, `tags[1]=a`, `tags[0]=a`, "", false},
		{"array select order", nested, formType, `tags[]=a&tags[]=b`, `tags[]=b&tags[]=a`, "", false},
	})
}

func TestMalformedForms(t *testing.T) {
	c := mustCompile(t, Spec{})
	for _, body := range []string{
		`a=%4`,
		`a=%zz`,
		`a%=1`,
		`a=%ff`, // not UTF-8
		`a=1&a[b]=2`,
		`a[b]=2&a=1`,
		`a=1&a[]=2`,
		`a[]=2&a=1`,
		`a[][b]=1`,
		`a[b]=1&a[b][c]=2`,
	} {
		if _, err := c.Sum(Input{MediaType: formType, Body: []byte(body)}); !errors.Is(err, ErrBody) {
			t.Errorf("Sum(%q) error = %v, want ErrBody", body, err)
		}
	}
}

func TestFormCanonical(t *testing.T) {
	c := mustCompile(t, Spec{})
	got := canonicalOf(t, c, Input{MediaType: formType, Body: []byte(`z=1&a[2]=c&a[0]=x&a[10]=y&b[x][y]=%22q%22&b[x][z]=&c=1&c=2&[odd=v`)})
	want := Version + "\n" + `form 110:4:[odd 1 1:v;4:a[0] 1 1:x;5:a[10] 1 1:y;4:a[2] 1 1:c;7:b[x][y] 1 3:"q";7:b[x][z] 1 0:;1:c 2 1:1 1:2;1:z 1 1:1;` + "\n"
	if got != want {
		t.Errorf("canonical form:\n%s\nwant:\n%s", got, want)
	}
}

func TestPathAndQuery(t *testing.T) {
	c := mustCompile(t, Spec{Path: []string{"pet_id", "owner"}, Query: []string{"dry_run", "tag"}})
	body := []byte(`{"a":1}`)
	in := func(path map[string]string, q string) Input {
		v, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		return Input{MediaType: jsonType, Body: body, Path: path, Query: v}
	}
	p1 := map[string]string{"pet_id": "p1", "owner": "o1"}
	tests := []struct {
		name string
		a, b Input
		same bool
	}{
		{"same", in(p1, "tag=x"), in(p1, "tag=x"), true},
		{"undeclared query ignored", in(p1, "tag=x&page=2"), in(p1, "tag=x"), true},
		{"query param order", in(p1, "tag=x&dry_run=1"), in(p1, "dry_run=1&tag=x"), true},
		{"path param differs", in(p1, ""), in(map[string]string{"pet_id": "p2", "owner": "o1"}, ""), false},
		{"path params swapped", in(p1, ""), in(map[string]string{"pet_id": "o1", "owner": "p1"}, ""), false},
		{"path param missing vs empty", in(map[string]string{"pet_id": "p1"}, ""), in(map[string]string{"pet_id": "p1", "owner": ""}, ""), false},
		{"query value differs", in(p1, "tag=x"), in(p1, "tag=y"), false},
		{"query missing vs empty", in(p1, ""), in(p1, "tag="), false},
		{"query values keep order", in(p1, "tag=x&tag=y"), in(p1, "tag=y&tag=x"), false},
		{"query one vs two values", in(p1, "tag=x"), in(p1, "tag=x&tag=x"), false},
		{"query value boundary", in(p1, "tag=a&tag=b"), in(p1, "tag=a+1%3Ab"), false},
	}
	for _, tt := range tests {
		sa, sb := sumOf(t, c, tt.a), sumOf(t, c, tt.b)
		if (sa == sb) != tt.same {
			t.Errorf("%s: same=%v, want %v", tt.name, sa == sb, tt.same)
		}
	}
	// A Spec's order of names does not matter.
	c2 := mustCompile(t, Spec{Path: []string{"owner", "pet_id"}, Query: []string{"tag", "dry_run"}})
	if sumOf(t, c, in(p1, "tag=x")) != sumOf(t, c2, in(p1, "tag=x")) {
		t.Error("the order of names in Spec changed the fingerprint")
	}
	// Path and body are separate: moving a value between them changes it.
	cb := mustCompile(t, Spec{Path: []string{"id"}})
	x := sumOf(t, cb, Input{MediaType: jsonType, Body: []byte(`"1"`), Path: map[string]string{"id": "2"}})
	y := sumOf(t, cb, Input{MediaType: jsonType, Body: []byte(`"2"`), Path: map[string]string{"id": "1"}})
	if x == y {
		t.Error("body and path values are interchangeable")
	}
}

func TestCanonicalLayout(t *testing.T) {
	c := mustCompile(t, Spec{Path: []string{"id"}, Query: []string{"q", "r"}})
	got := canonicalOf(t, c, Input{
		MediaType: jsonType, Body: []byte(`{"b":[1.0],"a":"x"}`),
		Path: map[string]string{"id": "p 1"}, Query: url.Values{"q": {"", "a"}},
	})
	want := "idemgen-fingerprint/1\n" +
		"body 17:{\"a\":\"x\",\"b\":[1]}\n" +
		"path 2:id 3:p 1\n" +
		"query 1:q 2 0: 1:a\n" +
		"query 1:r -\n"
	if got != want {
		t.Errorf("canonical form:\n%s\nwant:\n%s", got, want)
	}
	c0 := mustCompile(t, Spec{})
	if got := canonicalOf(t, c0, Input{}); got != Version+"\nbody -\n" {
		t.Errorf("no body: %q", got)
	}
}

func TestMediaTypes(t *testing.T) {
	c := mustCompile(t, Spec{})
	for _, mt := range []string{"text/plain", "", "application/xml", "json", "+json", "multipart/form-data"} {
		_, err := c.Sum(Input{MediaType: mt, Body: []byte(`{}`)})
		if !errors.Is(err, ErrMediaType) {
			t.Errorf("media type %q: error %v, want ErrMediaType", mt, err)
		}
		// Without a body there is nothing to parse.
		if _, err := c.Sum(Input{MediaType: mt}); err != nil {
			t.Errorf("media type %q, empty body: %v", mt, err)
		}
	}
	for _, mt := range []string{"application/json", "application/problem+json", "application/vnd.api+json", "application/json; charset=utf-8"} {
		if _, err := c.Sum(Input{MediaType: mt, Body: []byte(`{}`)}); err != nil {
			t.Errorf("media type %q: %v", mt, err)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, spec := range []Spec{
		{Body: []Field{{Pointer: "amount"}}},
		{Body: []Field{{Pointer: "/a~2"}}},
		{Body: []Field{{Pointer: "/a~"}}},
		{Body: []Field{{Pointer: "/a"}, {Pointer: "/a"}}},
		{Exclude: "key"},
		{Path: []string{"id", "id"}},
		{Query: []string{"q", "q"}},
	} {
		if _, err := Compile(spec); !errors.Is(err, ErrSpec) {
			t.Errorf("Compile(%+v) error = %v, want ErrSpec", spec, err)
		}
	}
}

func TestSumMatchesCompiled(t *testing.T) {
	in := Input{MediaType: jsonType, Body: []byte(`{"amount":5,"currency":"EUR"}`)}
	got, err := Sum(&transfer, in)
	if err != nil {
		t.Fatal(err)
	}
	if want := sumOf(t, mustCompile(t, transfer), in); got != want {
		t.Error("Sum and Compiled.Sum disagree")
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		mt, body, ptr string
		want          string
		found         bool
	}{
		{jsonType, `{"k":"abc","a":1}`, "/k", `"abc"`, true},
		{jsonType, `{"m":{"k":"a\u0062c"}}`, "/m/k", `"abc"`, true},
		{jsonType, `{"k":5}`, "/k", `5`, true},
		{jsonType, `{"a":1}`, "/k", ``, false},
		{jsonType, `{"a":[{"k":"x"}]}`, "/a/0/k", ``, false},
		{jsonType, ``, "/k", ``, false},
		{formType, `k=abc&a=1`, "/k", `"abc"`, true},
		{formType, `m[k]=abc`, "/m/k", `"abc"`, true},
		{formType, `k=a&k=b`, "/k", `["a","b"]`, true},
	}
	for _, tt := range tests {
		got, found, err := Lookup(tt.mt, []byte(tt.body), tt.ptr)
		if err != nil || found != tt.found || string(got) != tt.want {
			t.Errorf("Lookup(%q, %q) = %s, %v, %v; want %s, %v", tt.body, tt.ptr, got, found, err, tt.want, tt.found)
		}
	}
	if _, _, err := Lookup(jsonType, []byte(`{"k":`), "/k"); !errors.Is(err, ErrBody) {
		t.Errorf("Lookup on broken JSON: %v, want ErrBody", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	c := mustCompile(t, transfer)
	bodies := []string{
		`{"amount":1,"currency":"EUR","from_account":"a","to_account":"b"}`,
		`{"amount":2,"currency":"USD","from_account":"c","to_account":"d","memo":"` + strings.Repeat("x", 500) + `"}`,
	}
	want := make([][32]byte, len(bodies))
	for i, b := range bodies {
		want[i] = sumOf(t, c, Input{MediaType: jsonType, Body: []byte(b)})
	}
	done := make(chan error)
	for g := range 4 {
		go func() {
			for i := range 200 {
				k := (i + g) % len(bodies)
				s, err := c.Sum(Input{MediaType: jsonType, Body: []byte(bodies[k])})
				if err == nil && s != want[k] {
					err = errors.New("sum changed under concurrent use")
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// SumLookup is Sum and Lookup from one parse; it must answer exactly what
// they answer apart, also when the canonical form rewrites the parsed body
// (an excluded key, typed form values).
func TestSumLookupAgrees(t *testing.T) {
	specs := map[string]Spec{
		"fields":       transfer,
		"whole":        {},
		"exclude key":  {Exclude: "/k"},
		"exclude deep": {Exclude: "/m/k"},
		"typed form":   {MediaType: formType, Body: []Field{{Pointer: "/a", Type: Integer}, {Pointer: "/k"}}},
	}
	bodies := []struct{ mt, body, ptr string }{
		{jsonType, `{"k":"abc","a":1}`, "/k"},
		{jsonType, `{"a":1,"k":"abc"}`, "/k"},
		{jsonType, `{"m":{"k":"a\u0062c","x":1}}`, "/m/k"},
		{jsonType, `{"a":1}`, "/k"},
		{jsonType, `{"a":[{"k":"x"}]}`, "/a/0/k"},
		{jsonType, `{"amount":5,"currency":"EUR","k":"x"}`, "/k"},
		{jsonType, ``, "/k"},
		{formType, `k=abc&a=1`, "/k"},
		{formType, `a=7&k=abc`, "/k"},
		{formType, `m[k]=abc&a=2`, "/m/k"},
		{formType, `k=a&k=b`, "/k"},
		{jsonType, `{"k":`, "/k"},
		{formType, `k=%zz`, "/k"},
	}
	for name, spec := range specs {
		c := mustCompile(t, spec)
		for _, b := range bodies {
			if spec.MediaType != "" && b.mt != spec.MediaType {
				continue
			}
			in := Input{MediaType: b.mt, Body: []byte(b.body)}
			sum, v, found, err := c.SumLookup(in, b.ptr)
			wantSum, sumErr := c.Sum(in)
			wantV, wantFound, lookupErr := Lookup(b.mt, in.Body, b.ptr)
			if (err != nil) != (sumErr != nil) || (err != nil) != (lookupErr != nil) {
				t.Errorf("%s, %q: SumLookup error %v; Sum error %v, Lookup error %v", name, b.body, err, sumErr, lookupErr)
				continue
			}
			if err != nil {
				if !errors.Is(err, ErrBody) {
					t.Errorf("%s, %q: error %v, want ErrBody", name, b.body, err)
				}
				continue
			}
			if sum != wantSum || found != wantFound || string(v) != string(wantV) {
				t.Errorf("%s, %q at %s: SumLookup = %x, %s, %v; apart = %x, %s, %v",
					name, b.body, b.ptr, sum[:4], v, found, wantSum[:4], wantV, wantFound)
			}
		}
	}
	if _, _, _, err := mustCompile(t, Spec{}).SumLookup(Input{MediaType: jsonType, Body: []byte(`{}`)}, "k"); !errors.Is(err, ErrSpec) {
		t.Errorf("SumLookup with a pointer without /: %v, want ErrSpec", err)
	}
	if err := CheckPointer("/a~2"); !errors.Is(err, ErrSpec) {
		t.Errorf("CheckPointer(/a~2) = %v, want ErrSpec", err)
	}
	if err := CheckPointer("/idempotency_key"); err != nil {
		t.Errorf("CheckPointer(/idempotency_key) = %v", err)
	}
}
