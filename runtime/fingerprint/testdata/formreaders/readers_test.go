// Package formreaders holds the differential test of form fingerprints
// against the form readers a Go server may use: net/http's ParseForm, and
// the form binder of oapi-codegen's runtime at the version its generator
// pins. It is a module of its own so that the project's go.mod never
// depends on oapi-codegen; the fingerprint package's tests run it.
package formreaders

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/oapi-codegen/runtime"

	"github.com/idemgen/idemgen/runtime/fingerprint"
)

const formType = "application/x-www-form-urlencoded"

// Small alphabets, so that random bodies often spell one request two ways,
// or two requests almost one way.
var (
	names = []string{
		"a", "a[]", "a[0]", "a[1]", "a[2]", "a[01]", "a[+1]", "a[-1]", "a[b]", "a[b][]", "a[0][x]", "a[1][x]",
		"a[1]x", "a%5B0%5D", "a%5b1%5d", "A", "%61", "coupon", "coupon[]", "amount", "AMOUNT", "flag",
	}
	values = []string{
		"", "x", "X", "%58", "x+y", "x%20y", "x%2By", "X;Y", "X%3BY", "1", "1000", "1e3", "1000.0", "01",
		"true", "TRUE", "%", "%zz", "%ff", "%C3%A9", "\u00e9",
	}
)

// randomBody is 0 to 5 pairs from the alphabets, sometimes with an empty
// pair or a pair without '='.
func randomBody(r *rand.Rand) string {
	var parts []string
	for range r.IntN(6) {
		switch r.IntN(12) {
		case 0:
			parts = append(parts, "")
		case 1:
			parts = append(parts, names[r.IntN(len(names))])
		default:
			parts = append(parts, names[r.IntN(len(names))]+"="+values[r.IntN(len(values))])
		}
	}
	return strings.Join(parts, "&")
}

// parseForm is what a handler reads from r.PostForm, and whether
// ParseForm reported an error.
func parseForm(body string) (url.Values, bool) {
	r, err := http.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	r.Header.Set("Content-Type", formType)
	err = r.ParseForm()
	return r.PostForm, err == nil
}

// Struct shapes oapi-codegen generates for form bodies: a field of every
// kind the binder reads differently (string, slice, nested object, slice
// of objects, map, number).
type (
	item struct {
		X string `form:"x"`
	}
	inner struct {
		B []string `form:"b"`
	}
	bindings struct {
		AString *string           `form:"a"`
		ASlice  []string          `form:"a"`
		AObject *inner            `form:"a"`
		AItems  []item            `form:"a"`
		AMap    map[string]string `form:"a"`
		Coupon  *string           `form:"coupon"`
		Coupons []string          `form:"coupon"`
		Amount  *int              `form:"amount"`
		AmountF *float64          `form:"amount"`
		Flag    *bool             `form:"flag"`
	}
)

// bindForm is what oapi-codegen's strict server hands the handler, each
// field bound on its own (a failing field does not hide the others), with
// a panic of the binder's (it has some on odd names) as its own outcome.
func bindForm(form url.Values) []string {
	v := reflect.ValueOf(&bindings{}).Elem()
	var out []string
	for i := range v.NumField() {
		f := v.Type().Field(i)
		tag := f.Tag.Get("form")
		if tag == "" || tag == "-" {
			continue
		}
		holder := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "V", Type: f.Type, Tag: f.Tag}}))
		out = append(out, fmt.Sprintf("%s=%s", f.Name, bindOne(holder.Interface(), form)))
	}
	return out
}

func bindOne(ptr any, form url.Values) (result string) {
	defer func() {
		if p := recover(); p != nil {
			result = "panic"
		}
	}()
	if err := runtime.BindForm(ptr, form, nil, nil); err != nil {
		return "error"
	}
	b, err := json.Marshal(ptr)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// restrict keeps the names a field may be read from: the field's own name
// and every name that starts with it and '['.
func restrict(form url.Values, field string) url.Values {
	out := url.Values{}
	for k, vs := range form {
		if k == field || strings.HasPrefix(k, field+"[") {
			out[k] = vs
		}
	}
	return out
}

// specs are the policies the test fingerprints with, and the form name
// each field reads ("" for a whole-body fingerprint).
var specs = []struct {
	name  string
	spec  fingerprint.Spec
	field string
}{
	{"whole body", fingerprint.Spec{}, ""},
	{"a as a string", fingerprint.Spec{Body: []fingerprint.Field{{Pointer: "/a", Type: fingerprint.String}}}, "a"},
	{"a as an array", fingerprint.Spec{Body: []fingerprint.Field{{Pointer: "/a", Type: fingerprint.Array}}}, "a"},
	{"a/0", fingerprint.Spec{Body: []fingerprint.Field{{Pointer: "/a/0"}}}, "a[0]"},
	{"coupon", fingerprint.Spec{Body: []fingerprint.Field{{Pointer: "/coupon", Type: fingerprint.String}}}, "coupon"},
	{"amount as an integer", fingerprint.Spec{Body: []fingerprint.Field{{Pointer: "/amount", Type: fingerprint.Integer}}}, "amount"},
	{"flag as a boolean", fingerprint.Spec{Body: []fingerprint.Field{{Pointer: "/flag", Type: fingerprint.Boolean}}}, "flag"},
}

// decoded is how every reader sees the part of a body a spec reads.
func decoded(body, field string) (string, bool) {
	form, ok := parseForm(body)
	if !ok {
		return "", false
	}
	if field != "" {
		form = restrict(form, field)
	}
	return fmt.Sprintf("%v %v", form, bindForm(form)), true
}

// checkCorpus fingerprints every body under every spec and checks both
// directions of the rule: one fingerprint only for bodies every reader
// decodes alike, and bodies ParseForm reads alike share a fingerprint.
func checkCorpus(t *testing.T, bodies []string) {
	t.Helper()
	for _, s := range specs {
		c, err := fingerprint.Compile(s.spec)
		if err != nil {
			t.Fatal(err)
		}
		bySum := map[[32]byte]string{}
		byValues := map[string]string{}
		for _, body := range bodies {
			sum, err := c.Sum(fingerprint.Input{MediaType: formType, Body: []byte(body)})
			if err != nil {
				continue // refused with 400: no reader is reached
			}
			dec, ok := decoded(body, s.field)
			if !ok {
				t.Errorf("%s: %q fingerprinted, but ParseForm reports an error", s.name, body)
				continue
			}
			if other, seen := bySum[sum]; seen {
				if odec, _ := decoded(other, s.field); odec != dec {
					t.Errorf("%s: %q and %q share a fingerprint, but readers decode\n %s\n %s", s.name, body, other, dec, odec)
				}
			} else {
				bySum[sum] = body
			}
			if body == "" {
				// No body at all, which the fingerprint tells apart
				// from a form of no pairs ("&"): finer than the
				// readers, never coarser.
				continue
			}
			form, _ := parseForm(body)
			if s.field != "" {
				form = restrict(form, s.field)
			}
			key := form.Encode()
			if other, seen := byValues[key]; seen {
				osum, _ := c.Sum(fingerprint.Input{MediaType: formType, Body: []byte(other)})
				if osum != sum {
					t.Errorf("%s: ParseForm reads %q and %q alike, but their fingerprints differ", s.name, body, other)
				}
			} else {
				byValues[key] = body
			}
		}
	}
}

func TestFormReaders(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	bodies := []string{
		`items[1]=a`, `items[0]=a`, `items[0]=a&items[2]=b`, `items[0]=a&items[1]=b`,
		`coupon=X;Y`, `coupon=X%3BY`, `a=1&a=2`, `a[]=1&a[]=2`, `a[0]=1&a[1]=2`,
		`amount=1000`, `amount=1e3`, `a[0]=x&a[1]x=y`, `a[0]=x`,
	}
	n := 5000
	if testing.Short() {
		n = 2000
	}
	for range n {
		bodies = append(bodies, randomBody(r))
	}
	checkCorpus(t, bodies)
}

func FuzzFormReaders(f *testing.F) {
	f.Add(`items[1]=a`, `items[0]=a`)
	f.Add(`coupon=X;Y`, `coupon=X%3BY`)
	f.Add(`a=1&a=2`, `a[]=1&a[]=2`)
	f.Add(`a[0]=x&a[1]x=y`, `a[0]=x`)
	f.Fuzz(func(t *testing.T, a, b string) {
		checkCorpus(t, []string{a, b})
	})
}
