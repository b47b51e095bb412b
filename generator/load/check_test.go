package load

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

func TestDefaultsMergeFieldByField(t *testing.T) {
	spec, diags := loadString(t, `openapi: 3.0.3
info: {title: t, version: "1"}
x-idempotency:
  ttl: 48h
  lease: 30s
  scope: tenant
  replayHeaders: [X-Cost]
paths:
  /a:
    post:
      operationId: a
      x-idempotency: true
      responses: {"200": {description: ok}}
  /b:
    post:
      operationId: b
      x-idempotency:
        lease: 10s
        transactional: true
        replayHeaders: [X-Other]
      responses: {"200": {description: ok}}
  /c:
    post:
      operationId: c
      responses: {"200": {description: ok}}
  /d:
    patch:
      operationId: d
      x-idempotency: false
      responses: {"200": {description: ok}}
`)
	if spec == nil || len(diags) != 0 {
		t.Fatalf("diagnostics: %q", diags)
	}
	if len(spec.Operations) != 2 {
		t.Fatalf("got %d operations, want 2 (false and absent leave an operation alone)", len(spec.Operations))
	}
	a, b := spec.Operations[0].Policy, spec.Operations[1].Policy
	wantA := model.Policy{
		Scope: "tenant", KeyIn: key.InHeader, KeyName: "Idempotency-Key", KeyMaxLength: 255,
		TTL: 48 * time.Hour, Lease: 30 * time.Second, MaxSnapshotBytes: 1 << 20,
		ReplayHeaders: []string{"X-Cost"}, OnLeaseExpiry: "fail-closed",
	}
	if diff := cmp.Diff(wantA, a); diff != "" {
		t.Errorf("a (-want +got):\n%s", diff)
	}
	wantB := wantA
	wantB.Lease = 10 * time.Second
	wantB.Transactional = true
	wantB.OnLeaseExpiry = "takeover"
	wantB.ReplayHeaders = []string{"X-Other"}
	if diff := cmp.Diff(wantB, b); diff != "" {
		t.Errorf("b (-want +got):\n%s", diff)
	}
}

func TestKeyAgreement(t *testing.T) {
	spec := func(policy, params string) string {
		return `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      parameters:
` + indent(params, "        ") + `
      x-idempotency:
` + indent(policy, "        ") + `
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                idempotency_key: {type: string}
      responses: {"200": {description: ok}}
`
	}
	cases := []struct {
		name, policy, params string
		want                 []string // substrings, one per diagnostic; nil means none
	}{
		{"header agrees", "required: true", "- {name: idempotency-key, in: header, required: true, schema: {type: string}}", nil},
		{"header optional but required by policy", "required: true", "- {name: Idempotency-Key, in: header, schema: {type: string}}",
			[]string{"warning: POST /x (x): x-idempotency.required: the policy requires a key, but the spec declares the header parameter Idempotency-Key (line 8) optional"}},
		{"header required but policy optional", "required: false", "- {name: Idempotency-Key, in: header, required: true, schema: {type: string}}",
			[]string{"warning: POST /x (x): x-idempotency.required: the spec declares the header parameter Idempotency-Key (line 8) required, but the policy lets requests without a key through"}},
		{"header not string", "key: header:X-Key", "- {name: X-Key, in: header, schema: {type: integer}}",
			[]string{"x-idempotency.key: the spec declares the header parameter X-Key (line 8) as integer"}},
		{"query key", "key: query:idem", "- {name: idem, in: query, schema: {type: boolean}}",
			[]string{"the spec declares the query parameter idem (line 8) as boolean"}},
		{"query key names are case-sensitive", "key: query:Idem", "- {name: idem, in: query, schema: {type: boolean}}", nil},
		{"body key", "key: body:/idempotency_key", "- {name: other, in: query, schema: {type: string}}", nil},
		{"takeover without transactional", "onLeaseExpiry: takeover", "- {name: other, in: query, schema: {type: string}}",
			[]string{"warning: POST /x (x): x-idempotency.onLeaseExpiry: takeover without transactional"}},
		{"query list", "query: [other, idem]", "- {name: other, in: query, schema: {type: string}}\n- {name: Idem, in: query, schema: {type: string}}",
			[]string{"idem is not a query parameter of this operation (did you mean Idem?)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, diags := loadString(t, spec(c.policy, c.params))
			if len(diags) != len(c.want) {
				t.Fatalf("diagnostics %q, want %d", diags, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(diags[i], w) {
					t.Errorf("diagnostic %q does not contain %q", diags[i], w)
				}
			}
		})
	}
}

func TestPathItemParametersAndOverride(t *testing.T) {
	spec, diags := loadString(t, `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x/{id}:
    parameters:
      - {name: id, in: path, required: true, schema: {type: string}}
      - {name: Idempotency-Key, in: header, schema: {type: integer}}
      - {name: region, in: query, schema: {type: string}}
    post:
      parameters:
        - {name: idempotency-key, in: header, required: true, schema: {type: string}}
      x-idempotency: {required: true, query: [region]}
      responses: {"200": {description: ok}}
`)
	if spec == nil || len(diags) != 0 {
		t.Fatalf("diagnostics: %q (the operation's header parameter must replace the path item's)", diags)
	}
	op := spec.Operations[0]
	if !cmp.Equal(op.Policy.Query, []string{"region"}) || !cmp.Equal(op.PathParams, []string{"id"}) || op.ID != "post_x_id" || op.GoName != "PostXId" {
		t.Errorf("operation = %+v", op)
	}
}

func TestWarnings(t *testing.T) {
	spec, diags := loadString(t, `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /events:
    post:
      operationId: stream
      x-idempotency: true
      requestBody:
        content:
          multipart/form-data:
            schema: {type: object}
      responses:
        "200":
          description: ok
          content:
            text/event-stream: {schema: {type: string}}
            application/x-ndjson: {schema: {type: string}}
  /odd/{a:
    post:
      operationId: odd
      responses: {"200": {description: ok}}
`)
	if spec == nil {
		t.Fatalf("warnings must not refuse the spec: %q", diags)
	}
	// An unusual path template on an operation without a policy is not the
	// generator's business: /odd/{a passes without a word.
	want := []string{
		"spec.yaml:7:7: warning: POST /events (stream): responses of type application/x-ndjson, text/event-stream are streamed",
		"spec.yaml:7:7: warning: POST /events (stream): the request body is multipart/form-data only",
	}
	if len(diags) != len(want) {
		t.Fatalf("diagnostics %q", diags)
	}
	for i, w := range want {
		if !strings.HasPrefix(diags[i], w) {
			t.Errorf("diagnostic %d = %q, want prefix %q", i, diags[i], w)
		}
	}
}

func TestDocumentLevelWarnings(t *testing.T) {
	_, diags := loadString(t, `openapi: 3.0.3
info: {title: t, version: "1"}
x-idempotency:
  ttl: 1h
  fingerprint: [/a]
paths: {}
`)
	want := []string{
		"spec.yaml:3:1: warning: the document-level x-idempotency sets defaults, but no operation opts in",
		"spec.yaml:5:3: warning: x-idempotency.fingerprint: a document-level fingerprint applies to the request body of every annotated operation",
	}
	if len(diags) != len(want) {
		t.Fatalf("diagnostics %q", diags)
	}
	for i, w := range want {
		if !strings.HasPrefix(diags[i], w) {
			t.Errorf("diagnostic %d = %q, want prefix %q", i, diags[i], w)
		}
	}
}

func TestRefsAndValidationAreWarningsUnlessNeeded(t *testing.T) {
	spec, diags := loadString(t, `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      x-idempotency: {fingerprint: [/a]}
      parameters:
        - {name: q, in: query, schema: {type: string}, example: 5}
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                a: {type: string, default: 7}
                b: {$ref: 'other.yaml#/B'}
      responses:
        "200":
          description: ok
          content:
            application/json: {schema: {$ref: '#/components/schemas/Gone'}}
`)
	if spec == nil {
		t.Fatalf("unrelated faults must not refuse the spec: %q", diags)
	}
	want := []string{
		`spec.yaml:17:21: warning: $ref "other.yaml#/B" refers to another file`,
		`spec.yaml:22:41: warning: $ref "#/components/schemas/Gone" does not resolve: the document has no member "components"`,
	}
	if len(diags) != len(want) {
		t.Fatalf("diagnostics %q", diags)
	}
	for i, w := range want {
		if !strings.HasPrefix(diags[i], w) {
			t.Errorf("diagnostic %d = %q, want prefix %q", i, diags[i], w)
		}
	}
}

func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		path, want string
		notOpenAPI bool
	}{
		{filepath.Join(dir, "missing.yaml"), "no such file", false},
		{write("swagger.yaml", "swagger: '2.0'\ninfo: {title: t, version: '1'}\npaths: {}\n"), "Swagger 2.0", true},
		{write("v2.yaml", "openapi: 2.0.0\npaths: {}\n"), `openapi is "2.0.0"`, true},
		{write("none.yaml", "info: {}\n"), "no openapi version", true},
		{write("bad.json", "{\"openapi\": \"3.0.0\""), "not YAML or JSON", false},
		{write("shape.yaml", "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: 5\n"), "", true},
	}
	for _, c := range cases {
		spec, diags, err := Load(context.Background(), c.path, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrNotOpenAPI3) != c.notOpenAPI {
			t.Errorf("Load(%s) = %v, %v, %v; want an error containing %q (ErrNotOpenAPI3: %v)", filepath.Base(c.path), spec, diags, err, c.want, c.notOpenAPI)
		}
	}
}

func TestReferenceOfTheWrongKind(t *testing.T) {
	spec, diags := loadString(t, `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      x-idempotency: true
      parameters:
        - $ref: '#/components/schemas/Money'
      responses: {"200": {description: ok}}
components:
  schemas:
    Money: {type: object}
`)
	if spec != nil || len(diags) != 1 || !strings.HasPrefix(diags[0], `spec.yaml:9:11: error: cannot resolve the document's references: `) || !strings.Contains(diags[0], "#/components/schemas/Money") {
		t.Errorf("diagnostics %q", diags)
	}
}
