package load

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/generator/model"
)

// wantDiags fails unless got holds exactly want, in order.
func wantDiags(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("diagnostics:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// JSON written by Python's json.dump escapes every character outside ASCII,
// an emoji as a surrogate pair, which YAML's double-quoted strings do not
// allow.
func TestJSONSurrogatePairsLoad(t *testing.T) {
	src := `{"openapi": "3.0.3", "info": {"title": "\ud83d\udc4d \ud83d\udc4d", "version": "1"},
"paths": {"/x": {"post": {"summary": "\ud83d\udc4d", "operationId": "x", "x-idempotency": {"ttl": "\ud83d\udc4d", "lease": "1s"},
"responses": {"200": {"description": "ok"}}}}}}`
	spec, diags, err := LoadData(context.Background(), []byte(src), "spec.json", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range diags {
		got = append(got, d.String())
	}
	// The ttl is on line 2; the column counts characters of the file as
	// written, escapes and all.
	col := strings.Index(strings.Split(src, "\n")[1], `"ttl"`) + 1
	wantDiags(t, got, "spec.json:2:"+strconv.Itoa(col)+`: error: POST /x (x): x-idempotency.ttl: "👍" is not a duration (use 7d, 24h, 90m)`)
	if spec != nil {
		t.Errorf("spec with an error came back")
	}
	src = strings.Replace(src, `"ttl": "\ud83d\udc4d", `, "", 1)
	spec, _, err = LoadData(context.Background(), []byte(src), "spec.json", Options{})
	if err != nil || spec == nil {
		t.Fatalf("LoadData: %v", err)
	}
	if spec.Title != "👍 👍" || spec.Operations[0].Summary != "👍" {
		t.Errorf("title %q, summary %q", spec.Title, spec.Operations[0].Summary)
	}
}

func TestDuplicateKeys(t *testing.T) {
	src := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      summary: first
      summary: second
      x-idempotency:
        ttl: 1h
        ttl: 2h
      responses: {"200": {description: ok}}
`
	spec, got := loadString(t, src)
	wantDiags(t, got,
		`spec.yaml:11:9: error: x-idempotency.ttl: set twice (first on line 10)`,
		`spec.yaml:8:7: warning: "summary" is set twice (first on line 7); the later value is used`,
	)
	if spec != nil {
		t.Error("a spec with a duplicate inside x-idempotency loaded")
	}
	spec, got = loadString(t, strings.Replace(src, "        ttl: 2h\n", "", 1))
	wantDiags(t, got, `spec.yaml:8:7: warning: "summary" is set twice (first on line 7); the later value is used`)
	if spec == nil || spec.Operations[0].Summary != "second" {
		t.Fatalf("spec %+v", spec)
	}
}

// A composition cycle through anyOf and allOf made the fingerprint walk
// exponential in the depth bound: this spec took over a minute.
func TestCompositionCyclesAreWalkedOnce(t *testing.T) {
	src := schemaSpec("application/json", "$ref: '#/components/schemas/Query'", "[/and/nope, /term]") + `    Query:
      anyOf:
        - $ref: '#/components/schemas/Term'
        - $ref: '#/components/schemas/And'
        - $ref: '#/components/schemas/Or'
    Term:
      type: object
      properties:
        term: {type: string}
    And:
      allOf:
        - $ref: '#/components/schemas/Query'
        - type: object
          properties:
            and: {type: array, items: {$ref: '#/components/schemas/Query'}}
    Or:
      allOf:
        - $ref: '#/components/schemas/Query'
        - $ref: '#/components/schemas/And'
        - type: object
          properties:
            or: {type: array, items: {$ref: '#/components/schemas/Query'}}
`
	start := time.Now()
	_, got := loadString(t, src)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("loading took %v", d)
	}
	wantDiags(t, got, `spec.yaml:8:23: error: POST /x (x): x-idempotency.fingerprint: /and/nope points into the array /and, which is fingerprinted as one whole value; list /and instead`)
}

func TestMisspeltExtensionWarns(t *testing.T) {
	_, got := loadString(t, `openapi: 3.0.3
info: {title: t, version: "1"}
X-Idempotency: {ttl: 1h}
paths:
  /a:
    x-idempotancy: true
    post:
      x-idempotent: true
      responses: {"200": {description: ok}}
    patch:
      x-idempotency-key: whatever
      x-idempotency: true
      responses: {"200": {description: ok}}
`)
	wantDiags(t, got,
		`spec.yaml:3:1: error: X-Idempotency is not x-idempotency: extension names are case-sensitive, and idemgen reads the extension in lower case only, so the policy would be ignored; write x-idempotency`,
		`spec.yaml:6:5: warning: x-idempotancy is not an extension idemgen reads, so it is ignored (did you mean x-idempotency?)`,
		`spec.yaml:8:7: warning: x-idempotent is not an extension idemgen reads, so it is ignored (did you mean x-idempotency?)`,
	)
}

func TestNullableAnyOfKeepsItsType(t *testing.T) {
	spec, got := loadString(t, schemaSpec("application/json", `type: object
properties:
  n:
    anyOf: [{type: integer}, {type: "null"}]
  m:
    oneOf: [{type: "null"}, {$ref: '#/components/schemas/Money'}]`, "[/n, /m]"))
	wantDiags(t, got)
	if spec == nil {
		t.Fatal("no spec")
	}
	fp := spec.Operations[0].Policy.Fingerprint
	if len(fp) != 2 || fp[0].Type != model.TypeObject || fp[1].Type != model.TypeInteger {
		t.Errorf("fingerprint %+v, want /m object and /n integer", fp)
	}
}

func TestNonASCIIOperationIDs(t *testing.T) {
	for id, want := range map[string]string{
		"créerPaiement":       "CréerPaiement",
		"cre\u0301erPaiement": "CréerPaiement", // decomposed é: a mark is not a letter of a Go name
		"überweisen":          "Überweisen",
		"支払いを作成":              "Op支払いを作成",
		"支払いを取消":              "Op支払いを取消",
		"платёж.создать":      "ПлатёжСоздать",
	} {
		if got := goName(id); got != want {
			t.Errorf("goName(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestNearMissUnderOpenObjectWarns(t *testing.T) {
	spec, got := loadString(t, schemaSpec("application/json", `type: object
additionalProperties: true
properties:
  date_of_birth: {type: string}
  name: {type: string}`, "[/date_of_birthZq, /nickname]"))
	wantDiags(t, got, `spec.yaml:8:23: warning: POST /x (x): x-idempotency.fingerprint: /date_of_birthZq is not a declared property; additionalProperties lets it through, but did you mean /date_of_birth?`)
	if spec == nil || len(spec.Operations[0].Policy.Fingerprint) != 2 {
		t.Fatalf("spec %+v", spec)
	}
}

// One mistake, one diagnostic: an operation's bad ttl draws no second error
// about the document's ttl against its clientRetryBudget, at a line the
// user never touched; and a ttl/budget conflict points at the field the
// operation itself set.
func TestLifetimeConflictsPointAtWhatWasSet(t *testing.T) {
	spec := func(opPolicy string) string {
		return `openapi: 3.0.3
info: {title: t, version: "1"}
x-idempotency:
  clientRetryBudget: 3d
paths:
  /x:
    post:
      operationId: x
      x-idempotency: ` + opPolicy + `
      responses: {"200": {description: ok}}
`
	}
	_, got := loadString(t, spec(`{ttl: "7 days"}`))
	wantDiags(t, got, `spec.yaml:9:23: error: POST /x (x): x-idempotency.ttl: "7 days" is not a duration (use 7d, 24h, 90m)`)

	_, got = loadString(t, spec(`{ttl: 7d}`))
	wantDiags(t, got)

	_, got = loadString(t, spec(`{ttl: 2d}`))
	wantDiags(t, got, `spec.yaml:9:23: error: POST /x (x): x-idempotency.ttl: ttl 2d is shorter than clientRetryBudget 3d: a client still retrying would meet a forgotten key and run the request again`)

	// Taking the document's budget with the built-in ttl: the document's
	// field is at fault, reported once however many operations inherit it.
	_, got = loadString(t, spec(`true`))
	wantDiags(t, got, `spec.yaml:4:3: error: x-idempotency.clientRetryBudget: ttl 1d is shorter than clientRetryBudget 3d: a client still retrying would meet a forgotten key and run the request again`)

	_, got = loadString(t, spec(`{lease: 5d, ttl: 4d}`))
	wantDiags(t, got, `spec.yaml:9:23: error: POST /x (x): x-idempotency.lease: lease 5d must be shorter than ttl 4d`)

	// A misspelt ttl is the one mistake: the built-in ttl that stands in
	// for it draws no second error against the budget.
	_, got = loadString(t, spec(`{tll: 2d}`))
	wantDiags(t, got, `spec.yaml:9:23: error: POST /x (x): x-idempotency: unknown field "tll" (did you mean ttl?)`)

	// Written correctly beside the misspelling, the real ttl is checked.
	_, got = loadString(t, spec(`{tll: 9d, ttl: 2d}`))
	wantDiags(t, got,
		`spec.yaml:9:23: error: POST /x (x): x-idempotency: unknown field "tll" (did you mean ttl?)`,
		`spec.yaml:9:32: error: POST /x (x): x-idempotency.ttl: ttl 2d is shorter than clientRetryBudget 3d: a client still retrying would meet a forgotten key and run the request again`)
}

// A body declared as JSON and multipart is ambiguous and must be reported,
// not pinned to JSON without a word (every multipart request with a key
// would get 415).
func TestTwoMediaTypesAreAmbiguous(t *testing.T) {
	src := func(policy string) string {
		return `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /files:
    post:
      operationId: upload
      x-idempotency: ` + policy + `
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
          multipart/form-data:
            schema: {type: object, properties: {file: {type: string, format: binary}}}
      responses: {"200": {description: ok}}
`
	}
	_, got := loadString(t, src("true"))
	wantDiags(t, got, `spec.yaml:7:7: error: POST /files (upload): the request body is declared as application/json and also as multipart/form-data, but the policy fingerprints one kind of body: a request of the other kind that carries a key would be refused with 415 before the handler runs. Set mediaType: application/json to protect those bodies alone, knowingly, or declare one kind`)
	spec, got := loadString(t, src("{mediaType: application/json}"))
	wantDiags(t, got)
	if spec == nil || spec.Operations[0].BodyMediaType != "application/json" {
		t.Fatalf("spec %+v", spec)
	}
	_, got = loadString(t, src("{mediaType: application/x-www-form-urlencoded}"))
	wantDiags(t, got, `spec.yaml:7:23: error: POST /files (upload): x-idempotency.mediaType: the request body does not declare application/x-www-form-urlencoded (it declares application/json, multipart/form-data)`)
}

// A key parameter's declared maxLength is the policy's key length limit:
// the policy must not keep 255 while the spec tells clients something else.
func TestKeyParameterMaxLength(t *testing.T) {
	src := func(policy string, maxLength int) string {
		return `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      x-idempotency: ` + policy + `
      parameters:
        - {name: Idempotency-Key, in: header, schema: {type: string, maxLength: ` + strconv.Itoa(maxLength) + `}}
      responses: {"200": {description: ok}}
`
	}
	spec, got := loadString(t, src("true", 64))
	wantDiags(t, got)
	if spec == nil || spec.Operations[0].Policy.KeyMaxLength != 64 {
		t.Fatalf("keyMaxLength not taken from the parameter: %+v", spec)
	}
	_, got = loadString(t, src("{keyMaxLength: 100}", 64))
	wantDiags(t, got, `spec.yaml:7:23: warning: POST /x (x): x-idempotency.keyMaxLength: 100 contradicts the maxLength 64 the spec declares for the header parameter Idempotency-Key (line 9); clients follow the spec, so make them agree`)
	_, got = loadString(t, src("true", 300))
	wantDiags(t, got, `spec.yaml:7:7: warning: POST /x (x): x-idempotency.keyMaxLength: the spec lets the header parameter Idempotency-Key (line 9) be 300 characters long, but a key is at most 255; keys longer than that are refused with 400`)
}

// A body key's declared maxLength is the policy's key length limit, as a
// key parameter's is: the policy must not keep 255 while the schema tells
// clients something else.
func TestBodyKeyMaxLength(t *testing.T) {
	src := func(policy, keySchema string) string {
		return `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      x-idempotency: ` + policy + `
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                request_id: ` + keySchema + `
                amount: {type: integer}
      responses: {"200": {description: ok}}
`
	}
	spec, got := loadString(t, src("{key: body:/request_id}", "{type: string, maxLength: 64}"))
	wantDiags(t, got)
	if spec == nil || spec.Operations[0].Policy.KeyMaxLength != 64 {
		t.Fatalf("keyMaxLength not taken from the body field: %+v", spec)
	}
	spec, got = loadString(t, src("{key: body:/request_id}", "{allOf: [{type: string, maxLength: 80}, {maxLength: 40}]}"))
	wantDiags(t, got)
	if spec == nil || spec.Operations[0].Policy.KeyMaxLength != 40 {
		t.Fatalf("keyMaxLength is not the tightest of allOf's: %+v", spec)
	}
	_, got = loadString(t, src("{key: body:/request_id, keyMaxLength: 100}", "{type: string, maxLength: 64}"))
	wantDiags(t, got, `spec.yaml:7:46: warning: POST /x (x): x-idempotency.keyMaxLength: 100 contradicts the maxLength 64 the spec declares for the body field /request_id; clients follow the spec, so make them agree`)
	spec, got = loadString(t, src("{key: body:/request_id}", "{type: string}"))
	wantDiags(t, got)
	if spec == nil || spec.Operations[0].Policy.KeyMaxLength != 255 {
		t.Fatalf("a body key without maxLength: %+v", spec)
	}
}

// Of oneOf's or anyOf's branches one is enough: a key the loosest branch
// allows is one the spec allows, so the policy must not refuse it: the
// limit is the loosest branch's, not the tightest member's (allOf's rule),
// and a 100-character key under a branch allowing 200 is accepted.
func TestBodyKeyMaxLengthOfAlternatives(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"oneOf at the key", `{type: object, properties: {rid: {oneOf: [{type: string, maxLength: 10}, {type: string, maxLength: 200}]}}}`, 200},
		{"anyOf with an unbounded branch", `{type: object, properties: {rid: {anyOf: [{type: string, maxLength: 10}, {type: string}]}}}`, 255},
		{"allOf around oneOf", `{type: object, properties: {rid: {allOf: [{maxLength: 100}, {oneOf: [{type: string, maxLength: 10}, {type: string, maxLength: 200}]}]}}}`, 100},
		{"oneOf of bodies", `{oneOf: [{type: object, properties: {rid: {type: string, maxLength: 10}}}, {type: object, properties: {rid: {type: string, maxLength: 50}}}]}`, 50},
		{"oneOf of bodies, one without the key's bound", `{oneOf: [{type: object, properties: {rid: {type: string, maxLength: 10}}}, {type: object, properties: {other: {type: string}}}]}`, 255},
		{"allOf of bodies", `{allOf: [{type: object, properties: {rid: {type: string, maxLength: 10}}}, {type: object, properties: {rid: {type: string, maxLength: 50}}}]}`, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, got := loadString(t, `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      x-idempotency: {key: body:/rid}
      requestBody:
        content:
          application/json:
            schema: `+tc.body+`
      responses: {"200": {description: ok}}
`)
			wantDiags(t, got)
			if spec == nil || spec.Operations[0].Policy.KeyMaxLength != tc.want {
				var n int
				if spec != nil {
					n = spec.Operations[0].Policy.KeyMaxLength
				}
				t.Errorf("keyMaxLength %d, want %d", n, tc.want)
			}
		})
	}
}
