package load

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/schema"
)

// schemaProperty is what the test reads of one property of the published
// x-idempotency schema.
type schemaProperty struct {
	Default     any    `json:"default"`
	Maximum     *int   `json:"maximum"`
	Description string `json:"description"`
}

// defaultInProse is a default the schema can only state in a description,
// such as "(default 24h)".
var defaultInProse = regexp.MustCompile(`\(default ([0-9a-z]+)\)`)

// The published schema states every default once, at the operation level,
// and states the loader's: a default respelt at the document level, or one
// that differs from what the loader applies, fails here.
func TestSchemaStatesTheLoadersDefaults(t *testing.T) {
	var s struct {
		Defs map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schema.Get("x-idempotency"), &s); err != nil {
		t.Fatal(err)
	}
	op := s.Defs["operation"].Properties
	for name, p := range s.Defs["document"].Properties {
		var c bytes.Buffer
		_ = json.Compact(&c, p)
		if want := `{"$ref":"#/$defs/operation/properties/` + name + `"}`; c.String() != want {
			t.Errorf("document-level %s is %s, want %s: the operation level states it once", name, c.String(), want)
		}
	}
	prop := func(name string) schemaProperty {
		var p schemaProperty
		if err := json.Unmarshal(op[name], &p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return p
	}
	for name, want := range map[string]any{
		"scope":             defaultScope,
		"key":               "header:" + defaultKeyHeader,
		"keyMaxLength":      float64(defaultKeyMaxLength),
		"cacheServerErrors": false,
		"transactional":     false,
	} {
		if got := prop(name).Default; got != want {
			t.Errorf("schema default of %s is %v, the loader's %v", name, got, want)
		}
	}
	if m := prop("keyMaxLength").Maximum; m == nil || *m != key.MaxLength {
		t.Errorf("schema keyMaxLength maximum is %s, key.MaxLength %d", op["keyMaxLength"], key.MaxLength)
	}
	if d, _ := prop("maxSnapshotBytes").Default.(string); mustSize(t, d) != defaultMaxSnapshotBytes {
		t.Errorf("schema default of maxSnapshotBytes is %q, the loader's %d bytes", d, defaultMaxSnapshotBytes)
	}
	for name, want := range map[string]any{"ttl": defaultTTL, "lease": defaultLease} {
		m := defaultInProse.FindStringSubmatch(prop(name).Description)
		if m == nil {
			t.Errorf("schema description of %s states no default", name)
			continue
		}
		if d, err := parseDuration(m[1]); err != nil || d != want {
			t.Errorf("schema says %s defaults to %s, the loader's %v", name, m[1], want)
		}
	}
}

func mustSize(t *testing.T, s string) int64 {
	t.Helper()
	n, err := parseSize(s)
	if err != nil {
		t.Errorf("size %q: %v", s, err)
	}
	return n
}
