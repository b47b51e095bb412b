package key

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/fingerprint"
)

func TestParse(t *testing.T) {
	long := strings.Repeat("k", 255)
	tests := []struct {
		name  string
		value string
		max   int
		want  string
		err   error // nil for a valid key
	}{
		{"literal", "abc", 255, "abc", nil},
		{"uuid", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", 255, "3f2504e0-4f89-11d3-9a0c-0305e82c3301", nil},
		{"all visible ASCII", "!~\"\\#", 255, "!~\"\\#", nil},
		{"quoted", `"abc"`, 255, "abc", nil},
		{"quoted escapes", `"a\"b\\c"`, 255, `a"b\c`, nil},
		{"surrounding OWS", " \tabc\t ", 255, "abc", nil},
		{"quoted with OWS", `  "abc" `, 255, "abc", nil},
		{"literal quote inside", `a"b`, 255, `a"b`, nil},
		{"literal backslash", `a\b`, 255, `a\b`, nil},
		{"exactly max", long, 255, long, nil},
		{"quoted exactly max", `"` + long + `"`, 255, long, nil},
		{"max 1", "x", 1, "x", nil},

		{"empty", "", 255, "", ErrEmpty},
		{"only spaces", "   ", 255, "", ErrEmpty},
		{"quoted empty", `""`, 255, "", ErrEmpty},
		{"too long", long + "k", 255, "", ErrTooLong},
		{"quoted too long", `"` + long + `k"`, 255, "", ErrTooLong},
		{"too long small max", "ab", 1, "", ErrTooLong},
		{"inner space", "a b", 255, "", ErrBadChar},
		{"quoted inner space", `"a b"`, 255, "", ErrBadChar},
		{"control char", "a\x01b", 255, "", ErrBadChar},
		{"newline", "a\nb", 255, "", ErrBadChar},
		{"DEL", "a\x7f", 255, "", ErrBadChar},
		{"non-ASCII", "clé", 255, "", ErrBadChar},
		{"quoted non-ASCII", `"clé"`, 255, "", ErrBadChar},
		{"quoted control char", "\"a\x00\"", 255, "", ErrBadChar},
		{"unterminated", `"abc`, 255, "", ErrMalformed},
		{"lone quote", `"`, 255, "", ErrMalformed},
		{"bad escape", `"a\nb"`, 255, "", ErrMalformed},
		{"escape at end", `"abc\`, 255, "", ErrMalformed},
		{"escaped closing quote", `"abc\"`, 255, "", ErrMalformed},
		{"after closing quote", `"abc"d`, 255, "", ErrMalformed},
		{"two strings", `"a", "b"`, 255, "", ErrMalformed},
		{"parameter", `"abc";x=1`, 255, "", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.value, tt.max)
			if tt.err == nil {
				if err != nil || got != tt.want {
					t.Fatalf("Parse(%q) = %q, %v; want %q", tt.value, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.err) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) = %q, %v; want %v", tt.value, got, err, tt.err)
			}
			var ke *Error
			if !errors.As(err, &ke) || ke.Detail == "" {
				t.Fatalf("Parse(%q) error %v is not a *Error with a detail", tt.value, err)
			}
			for _, other := range []error{ErrEmpty, ErrTooLong, ErrBadChar, ErrMalformed, ErrRepeated, ErrNotString} {
				if other != tt.err && errors.Is(err, other) {
					t.Errorf("Parse(%q) error also matches %v", tt.value, other)
				}
			}
		})
	}
}

func TestMessagesNeverEchoTheKey(t *testing.T) {
	for _, v := range []string{"secret\x01key", "sécret", `"secret\x"`, `"secret" x`, "secret key" + strings.Repeat("y", 300)} {
		_, err := Parse(v, 255)
		if err == nil {
			t.Fatalf("Parse(%q) accepted", v)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("message repeats the key: %s", err)
		}
		for _, c := range err.Error() {
			if c < 0x20 || c == 0x7f {
				t.Errorf("message has control character %q: %q", c, err)
			}
		}
	}
}

func TestFromHeader(t *testing.T) {
	h := http.Header{}
	if k, present, err := FromHeader(h, "Idempotency-Key", 255); present || err != nil || k != "" {
		t.Errorf("no header: %q, %v, %v", k, present, err)
	}
	h.Set("Idempotency-Key", `"abc"`)
	if k, present, err := FromHeader(h, "idempotency-key", 255); !present || err != nil || k != "abc" {
		t.Errorf("one header: %q, %v, %v", k, present, err)
	}
	h.Set("Idempotency-Key", "")
	if _, present, err := FromHeader(h, "Idempotency-Key", 255); !present || !errors.Is(err, ErrEmpty) {
		t.Errorf("empty header: %v, %v", present, err)
	}
	h.Add("Idempotency-Key", "def")
	_, present, err := FromHeader(h, "Idempotency-Key", 255)
	if !present || !errors.Is(err, ErrRepeated) || !errors.Is(err, ErrInvalid) {
		t.Errorf("two header lines: %v, %v", present, err)
	}
	if err != nil && !strings.Contains(err.Error(), "Idempotency-Key") {
		t.Errorf("message does not name the header: %v", err)
	}
}

func TestFromQuery(t *testing.T) {
	tests := []struct {
		query   string
		want    string
		present bool
		err     error
	}{
		{"", "", false, nil},
		{"other=1", "", false, nil},
		{"key=abc", "abc", true, nil},
		{"key=%22abc%22", `"abc"`, true, nil}, // literal: no quoted form
		{"key=", "", true, ErrEmpty},
		{"key=a+b", "", true, ErrBadChar},
		{"key=a&key=b", "", true, ErrRepeated},
		{"key=" + strings.Repeat("x", 11), "", true, ErrTooLong},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		k, present, err := FromQuery(q, "key", 10)
		if k != tt.want || present != tt.present || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("FromQuery(%q) = %q, %v, %v; want %q, %v, %v", tt.query, k, present, err, tt.want, tt.present, tt.err)
		}
	}
}

func TestFromBody(t *testing.T) {
	const (
		js   = "application/json"
		form = "application/x-www-form-urlencoded"
	)
	tests := []struct {
		mt, body, ptr string
		want          string
		present       bool
		err           error
	}{
		{js, `{"idempotency_key":"abc","amount":1}`, "/idempotency_key", "abc", true, nil},
		{js, `{"idempotency_key":"a\u0062c"}`, "/idempotency_key", "abc", true, nil},
		{js, `{"k":"a\"b\\c\/d"}`, "/k", `a"b\c/d`, true, nil},
		{js, `{"meta":{"key":"abc"}}`, "/meta/key", "abc", true, nil},
		{"application/vnd.api+json", `{"k":"abc"}`, "/k", "abc", true, nil},
		{js, `{"amount":1}`, "/idempotency_key", "", false, nil},
		{js, ``, "/idempotency_key", "", false, nil},
		{js, `{"k":""}`, "/k", "", true, ErrEmpty},
		{js, `{"k":"a\nb"}`, "/k", "", true, ErrBadChar},
		{js, `{"k":"a\u0001b"}`, "/k", "", true, ErrBadChar},
		{js, `{"k":"clé"}`, "/k", "clé", true, nil},
		{js, `{"k":"\u00e9t\u00e9"}`, "/k", "été", true, nil},
		{js, `{"k":"支払い-1"}`, "/k", "支払い-1", true, nil},
		{js, `{"k":"` + strings.Repeat("é", 10) + `"}`, "/k", strings.Repeat("é", 10), true, nil},
		{js, `{"k":"` + strings.Repeat("é", 11) + `"}`, "/k", "", true, ErrTooLong},
		{js, `{"k":"a b"}`, "/k", "", true, ErrBadChar},
		{js, `{"k":"a\u3000b"}`, "/k", "", true, ErrBadChar},
		{js, `{"k":"a\u0085b"}`, "/k", "", true, ErrBadChar},
		{js, `{"k":"a\u007fb"}`, "/k", "", true, ErrBadChar},
		{js, `{"k":"` + strings.Repeat("x", 11) + `"}`, "/k", "", true, ErrTooLong},
		{js, `{"k":5}`, "/k", "", true, ErrNotString},
		{js, `{"k":null}`, "/k", "", true, ErrNotString},
		{js, `{"k":["abc"]}`, "/k", "", true, ErrNotString},
		{js, `{"k":{"a":"b"}}`, "/k", "", true, ErrNotString},
		{js, `{"k":"abc"`, "/k", "", false, fingerprint.ErrBody},
		{js, `{"k":"a","k":"b"}`, "/k", "", false, fingerprint.ErrBody},
		{js, `{"k":"a","K":"b"}`, "/k", "", false, fingerprint.ErrBody},
		{js, `{"\u212a":"a"}`, "/k", "", false, fingerprint.ErrBody},
		{form, `k=a&K=b`, "/k", "a", true, nil},
		{"text/plain", `k=abc`, "/k", "", false, fingerprint.ErrMediaType},

		{form, `idempotency_key=abc&amount=1`, "/idempotency_key", "abc", true, nil},
		{form, `amount=1&meta[key]=abc`, "/meta/key", "abc", true, nil},
		{form, `idempotency_key=%61bc`, "/idempotency_key", "abc", true, nil},
		{form, `amount=1`, "/idempotency_key", "", false, nil},
		{form, `idempotency_key=`, "/idempotency_key", "", true, ErrEmpty},
		{form, `idempotency_key=a+b`, "/idempotency_key", "", true, ErrBadChar},
		{form, `idempotency_key=a%0Ab`, "/idempotency_key", "", true, ErrBadChar},
		{form, `idempotency_key=cl%C3%A9-paiement-1`, "/idempotency_key", "", true, ErrTooLong},
		{form, `idempotency_key=cl%C3%A9-1`, "/idempotency_key", "clé-1", true, nil},
		{form, `idempotency_key=a&idempotency_key=b`, "/idempotency_key", "", true, ErrNotString},
		{form, `idempotency_key=%zz`, "/idempotency_key", "", false, fingerprint.ErrBody},
	}
	for _, tt := range tests {
		k, present, err := FromBody([]byte(tt.body), tt.mt, tt.ptr, 10)
		if k != tt.want || present != tt.present || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("FromBody(%q, %q) = %q, %v, %v; want %q, %v, %v", tt.body, tt.ptr, k, present, err, tt.want, tt.present, tt.err)
		}
		if errors.Is(tt.err, fingerprint.ErrBody) && errors.Is(err, ErrInvalid) {
			t.Errorf("FromBody(%q): a broken body is reported as an invalid key", tt.body)
		}
	}
}

// A body key is held to its own rule: the header's visible ASCII does not
// bind a JSON string or a form field, and the limit counts characters, as a
// schema's maxLength does, not bytes.
func TestCheckBody(t *testing.T) {
	tests := []struct {
		k   string
		max int
		err error
	}{
		{"clé-paiement-1", 255, nil},
		{"clé-paiement-1", 14, nil}, // 15 bytes, 14 characters
		{"clé-paiement-1", 13, ErrTooLong},
		{"\U0001F511", 1, nil},
		{"", 255, ErrEmpty},
		{"a\xffb", 255, ErrBadChar},
		{"a\u00a0b", 255, ErrBadChar},
		{"a\tb", 255, ErrBadChar},
	}
	for _, tt := range tests {
		if err := CheckBody(tt.k, tt.max); !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("CheckBody(%q, %d) = %v, want %v", tt.k, tt.max, err, tt.err)
		}
	}
	if err := Check("clé-paiement-1", 255); !errors.Is(err, ErrBadChar) {
		t.Errorf("Check (the header rule) accepted a non-ASCII key: %v", err)
	}
}

// quote writes k as a structured-field string.
func quote(k string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(k); i++ {
		if k[i] == '"' || k[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(k[i])
	}
	b.WriteByte('"')
	return b.String()
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b\\c"`, `"abc`, `"a\x"`, " k ", "", "\x00", "clé", `"a"b`, strings.Repeat("z", 300)} {
		f.Add(s, 255)
	}
	f.Add("abcdef", 3)
	f.Fuzz(func(t *testing.T, value string, maxLen int) {
		if maxLen < 1 || maxLen > 1024 {
			maxLen = 1 + (maxLen%1024+1024)%1024
		}
		k, err := Parse(value, maxLen)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", value, err)
			}
			if k != "" {
				t.Fatalf("Parse(%q) returned %q with an error", value, k)
			}
			return
		}
		if len(k) < 1 || len(k) > maxLen {
			t.Fatalf("Parse(%q, %d) accepted %q of length %d", value, maxLen, k, len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x21 || k[i] > 0x7e {
				t.Fatalf("Parse(%q) accepted byte 0x%02x", value, k[i])
			}
		}
		if strings.HasPrefix(trimOWS(value), `"`) {
			return
		}
		q := quote(k)
		back, err := Parse(q, maxLen)
		if err != nil || back != k {
			t.Fatalf("quoted %q as %s, parsed back %q, %v", k, q, back, err)
		}
	})
}
