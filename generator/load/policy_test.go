package load

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

// decodeYAML decodes src, the body of an x-idempotency object, as one
// layer and returns it with the diagnostics rendered as strings.
func decodeYAML(t *testing.T, src string) (*layer, []string) {
	t.Helper()
	tr, err := parseTree([]byte("x-idempotency:\n"+src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k, v := get(tr.root, "x-idempotency")
	diags := tr.diags
	l := decodeLayer(tr, k, v, reporter{diags: &diags})
	var out []string
	model.SortDiagnostics(diags)
	for _, d := range diags {
		out = append(out, d.String())
	}
	return l, out
}

func TestDecodeLayerFields(t *testing.T) {
	l, diags := decodeYAML(t, `
  scope: tenant
  fingerprint: [/b, /a~1x, /c~0d]
  query: [currency]
  ttl: 7d
  lease: 1m30s
  clientRetryBudget: 36h
  key: body:/idempotency_key
  keyMaxLength: 64
  required: true
  maxSnapshotBytes: 64KiB
  replayHeaders: [x-request-cost, ETag]
  cacheServerErrors: true
  onLeaseExpiry: fail-closed
  transactional: false
`)
	if len(diags) != 0 {
		t.Fatalf("diagnostics: %q", diags)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"scope", l.scope.v, "tenant"},
		{"ttl", l.ttl.v, 7 * 24 * time.Hour},
		{"lease", l.lease.v, 90 * time.Second},
		{"clientRetryBudget", l.clientRetryBudget.v, 36 * time.Hour},
		{"key", l.key.v, keySource{key.InBody, "/idempotency_key"}},
		{"keyMaxLength", l.keyMaxLength.v, 64},
		{"required", l.required.v, true},
		{"maxSnapshotBytes", l.maxSnapshotBytes.v, int64(64 << 10)},
		{"cacheServerErrors", l.cacheServerErrors.v, true},
		{"onLeaseExpiry", l.onLeaseExpiry.v, "fail-closed"},
		{"transactional set", l.transactional.ok, true},
		{"transactional", l.transactional.v, false},
		{"ttl line", l.ttl.pos.Line, 6},
		{"ttl col", l.ttl.pos.Col, 3},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	var fp, headers, query []string
	for _, it := range l.fingerprint.v {
		fp = append(fp, it.v)
	}
	for _, it := range l.replayHeaders.v {
		headers = append(headers, it.v)
	}
	for _, it := range l.query.v {
		query = append(query, it.v)
	}
	if diff := cmp.Diff([]string{"/b", "/a~1x", "/c~0d"}, fp); diff != "" {
		t.Errorf("fingerprint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"X-Request-Cost", "Etag"}, headers); diff != "" {
		t.Errorf("replayHeaders (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"currency"}, query); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
}

func TestDecodeLayerErrors(t *testing.T) {
	cases := []struct {
		src  string
		want string // a substring of the only diagnostic
	}{
		{"  ttl: 7 days", `t.yaml:2:3: error: x-idempotency.ttl: "7 days" is not a duration (use 7d, 24h, 90m)`},
		{"  ttl: 5", "not the bare number 5"},
		{"  ttl: 0s", `"0s" must be positive`},
		{"  ttl: 300ms", "is not a duration"},
		{"  ttl: 1.5h", "is not a duration"},
		{"  ttl: -5m", "is not a duration"},
		{"  ttl: 30m1h", "is not a duration"},
		{"  ttl: 9999999999999d", "is too long"},
		{"  ttl: [1h]", "must be a duration such as 24h, not a list"},
		{"  lease: {a: 1}", "must be a duration such as 24h, not an object"},
		{"  scope: global", `"global" is not a scope (use operation or tenant)`},
		{"  scope: tenat", `(did you mean tenant?)`},
		{"  scope: 1", "must be one of operation, tenant, not the number 1"},
		{"  onLeaseExpiry: take-over", "(did you mean takeover?)"},
		{"  keyMaxLength: 0", "must be from 1 to 255, not 0"},
		{"  keyMaxLength: 256", "must be from 1 to 255, not 256"},
		{"  keyMaxLength: 1.5", "must be a whole number from 1 to 255, not the number 1.5"},
		{"  required: yes", `must be true or false, not the string "yes"`},
		{"  required: null", "must be true or false, not null"},
		{"  cacheServerErrors: 0", "must be true or false, not the number 0"},
		{"  maxSnapshotBytes: 0", "must be a positive byte count"},
		{"  maxSnapshotBytes: 1MB", `"1MB" is ambiguous: write 1MiB (powers of 1024) or a plain byte count`},
		{"  maxSnapshotBytes: 64k", `write 64KiB`},
		{"  maxSnapshotBytes: 2GiB", "is too large (at most 1GiB)"},
		{"  maxSnapshotBytes: 1.5MiB", "is not a size"},
		{"  maxSnapshotBytes: true", "must be a size such as 64KiB"},
		{"  key: Idempotency-Key", "(did you mean header:Idempotency-Key?)"},
		{"  key: /idempotency_key", "(did you mean body:/idempotency_key?)"},
		{"  key: heder:Idempotency-Key", "(did you mean header:Idempotency-Key?)"},
		{"  key: 'header:'", "is not a valid header name"},
		{"  key: 'query:'", "query: needs a parameter name"},
		{"  key: 'body:'", "body: needs a JSON Pointer"},
		{"  key: body:/a~2", "~ must be followed by 0 or 1"},
		{"  key: 42", "must be a string of the form"},
		{"  fingerprint: /amount", `must be a list of JSON Pointers, not the string "/amount"`},
		{"  fingerprint: [amount]", `"amount" is not a JSON Pointer: a JSON Pointer starts with /`},
		{"  fingerprint: ['']", `"" is the whole body`},
		{"  fingerprint: [/a, /a]", "/a is listed twice"},
		{"  fingerprint: [/a, 3]", "each entry must be a JSON Pointer, not the number 3"},
		{"  fingerprint: []", "warning: x-idempotency.fingerprint: an empty list fingerprints the whole body"},
		{"  query: [a, a]", "a is listed twice"},
		{"  query: ['']", "cannot be empty"},
		{"  replayHeaders: [Set-Cookie]", "Set-Cookie is never stored: cookies"},
		{"  replayHeaders: [x-ratelimit-limit]", "X-Ratelimit-Limit is never stored: rate-limit state"},
		{"  replayHeaders: [RateLimit-Policy]", "Ratelimit-Policy is never stored: rate-limit state"},
		{"  replayHeaders: [X-Request-Id]", "X-Request-Id is never stored: a trace or request id"},
		{"  replayHeaders: [traceparent]", "Traceparent is never stored"},
		{"  replayHeaders: [Date]", "Date is never stored: a replay carries a fresh Date"},
		{"  replayHeaders: [a, A]", "A is listed twice (first on line 2)"},
		{"  replayHeaders: ['a b']", `"a b" is not a valid header name`},
		{"  replayHeaders: [Location]", "warning: x-idempotency.replayHeaders: Location is always replayed"},
		{"  tll: 1h", `x-idempotency: unknown field "tll" (did you mean ttl?)`},
		{"  key_max_length: 5", `(did you mean keyMaxLength?)`},
		{"  TTL: 1h", `(did you mean ttl?)`},
		{"  colour: red", `unknown field "colour" (known fields: scope, fingerprint`},
		{"  ttl: 1h\n  ttl: 2h", "set twice (first on line 2)"},
	}
	for _, c := range cases {
		_, diags := decodeYAML(t, c.src)
		if len(diags) != 1 || !strings.Contains(diags[0], c.want) {
			t.Errorf("%s:\n got  %q\n want one diagnostic containing %q", c.src, diags, c.want)
		}
	}
}

func TestDecodeLayerRejectedFieldIsUnset(t *testing.T) {
	l, diags := decodeYAML(t, "  ttl: 7 days\n  lease: 15s\n")
	if len(diags) != 1 {
		t.Fatalf("diagnostics: %q", diags)
	}
	if l.ttl.ok || !l.lease.ok {
		t.Errorf("ttl.ok = %v, lease.ok = %v; a rejected field must fall back to the default, a good one must stay", l.ttl.ok, l.lease.ok)
	}
}

func TestParseDuration(t *testing.T) {
	cases := map[string]time.Duration{
		"90s": 90 * time.Second, "15m": 15 * time.Minute, "24h": 24 * time.Hour,
		"7d": 7 * 24 * time.Hour, "1h30m": 90 * time.Minute, "1d12h": 36 * time.Hour, "0h5m": 5 * time.Minute,
	}
	for s, want := range cases {
		got, err := parseDuration(s)
		if err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "7", "7 days", "7D", "1w", "1h1h", "h", "0d0s", "+5s", "5 s"} {
		if _, err := parseDuration(s); err == nil {
			t.Errorf("parseDuration(%q) succeeded", s)
		}
	}
}

func TestParseSize(t *testing.T) {
	cases := map[string]int64{"1": 1, "65536": 65536, "64KiB": 64 << 10, "1MiB": 1 << 20, "1GiB": 1 << 30, "2 MiB": 2 << 20}
	for s, want := range cases {
		got, err := parseSize(s)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "0KiB", "1kib", "1KB", "1M", "1TiB", "1025MiB", "-1", "1.5KiB", "99999999999999999999"} {
		if _, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) succeeded", s)
		}
	}
}

func TestSplitPointer(t *testing.T) {
	got, err := splitPointer("/a~1b/c~0d/~01/")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a/b", "c~d", "~1", ""}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, p := range []string{"a", "/a~", "/a~2"} {
		if _, err := splitPointer(p); err == nil {
			t.Errorf("splitPointer(%q) succeeded", p)
		}
	}
}

func TestNames(t *testing.T) {
	ids := map[[2]string]string{
		{"POST", "/v1/customers/{customer}/sources"}: "post_v1_customers_customer_sources",
		{"PATCH", "/"}:                 "patch",
		{"POST", "/pets/{pet-id}/a.b"}: "post_pets_pet_id_a_b",
		{"POST", "/café/{x}"}:          "post_café_x",
	}
	for in, want := range ids {
		if got := deriveID(in[0], in[1]); got != want {
			t.Errorf("deriveID(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
	names := map[string]string{
		"createTransfer":                     "CreateTransfer",
		"post_v1_customers_customer_sources": "PostV1CustomersCustomerSources",
		"get-pet.by-id":                      "GetPetById",
		"PostFiles":                          "PostFiles",
		"3ds":                                "Op3ds",
		"":                                   "Op",
	}
	for in, want := range names {
		if got := goName(in); got != want {
			t.Errorf("goName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSuggest(t *testing.T) {
	cands := []string{"amount", "currency", "from_account"}
	for in, want := range map[string]string{"amout": "amount", "curency": "currency", "fromAccount": "from_account", "zzz": "", "a": ""} {
		if got := suggest(in, cands); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseTreeRefusals(t *testing.T) {
	cases := map[string]string{
		"a: [":          "not YAML or JSON",
		"":              "empty",
		"- 1\n- 2\n":    "top level is not an object",
		"a: &x [*x]\n":  "alias to itself",
		"a: .inf\n":     "not a number JSON can hold",
		"? null\n: 1\n": "mapping key is null",
	}
	for src, want := range cases {
		_, err := parseTree([]byte(src), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseTree(%q) = %v, want an error containing %q", src, err, want)
		}
	}
}

func TestParseTreeMergeKeys(t *testing.T) {
	tr, err := parseTree([]byte("base: &b {ttl: 1h, lease: 1m}\nx:\n  <<: *b\n  lease: 2m\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, x := get(tr.root, "x")
	_, ttl := get(x, "ttl")
	_, lease := get(x, "lease")
	if ttl == nil || ttl.Value != "1h" || lease == nil || lease.Value != "2m" {
		t.Errorf("merge: ttl=%v lease=%v", ttl, lease)
	}
	if x.Kind != yaml.MappingNode {
		t.Errorf("x is %v", x.Kind)
	}
}
