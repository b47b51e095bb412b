package generator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/idemgen/idemgen/generator/model"
)

// TestAttackCheckSeesGooseAnnotations: generate --check must fail when a
// migration on disk differs in what its tool reads. Migrations whose
// comment lines alone differ count as current, but goose's annotations
// are comment lines: with "-- +goose Down" moved up under "-- +goose Up",
// goose applies nothing on up (and creates the table on down), yet
// generate keeps the file and --check passes.
func TestAttackCheckSeesGooseAnnotations(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay:
    post:
      operationId: pay
      x-idempotency: true
      responses: {"200": {description: ok}}
`
	dir := t.TempDir()
	opts := Options{Migrations: "migrations", Layout: "goose"}
	files, diags := generateIn(t, dir, spec, opts)
	if model.HasErrors(diags) {
		t.Fatalf("generate: %s", diagText(diags))
	}
	if err := WriteDir(dir, files); err != nil {
		t.Fatal(err)
	}
	mig := filepath.Join(dir, "migrations", "00001_idempotency_keys.sql")
	data, err := os.ReadFile(mig)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if !strings.Contains(text, "-- +goose Up\n") || !strings.Contains(text, "-- +goose Down\n") {
		t.Fatalf("the goose migration has no Up and Down annotations:\n%s", text)
	}
	text = strings.Replace(text, "-- +goose Down\n", "", 1)
	text = strings.Replace(text, "-- +goose Up\n", "-- +goose Up\n-- +goose Down\n", 1)
	if err := os.WriteFile(mig, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}

	files, diags = generateIn(t, dir, spec, opts)
	if model.HasErrors(diags) {
		return // refused: the edited migration is reported
	}
	if diff, ok := CheckDir(dir, files); ok {
		t.Errorf("--check passes although the goose migration on disk now runs nothing on up (its Down annotation moved above every statement)")
	} else {
		t.Logf("--check reports:\n%s", diff)
	}
}

// breakingAfter generates from before into a temporary project, writes
// the files (the lock file among them), then generates from after
// against that lock, and returns the second generation's diagnostics.
func breakingAfter(t *testing.T, before, after string) []model.Diagnostic {
	t.Helper()
	dir := t.TempDir()
	files, diags := generateIn(t, dir, before, Options{})
	if model.HasErrors(diags) {
		t.Fatalf("generate the first spec: %s", diagText(diags))
	}
	if err := WriteDir(dir, files); err != nil {
		t.Fatal(err)
	}
	_, diags = generateIn(t, dir, after, Options{})
	return diags
}

// effectsSpec is a spec whose one operation declares one effect with
// policy fields of its own.
func effectsSpec(policy string) string {
	return `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /charges:
    post:
      operationId: createCharge
      x-idempotency: ` + policy + `
      responses: {"200": {description: ok}}
`
}

// TestAttackLockFlagsEffectRename: an effect's key is derived from the
// operation's stored name, the request's key and fingerprint, and the
// effect's name (idem.EffectKey). Renaming the effect in the spec gives
// every request made before the deploy a new effect key: a retry whose
// first attempt reached the processor and was then released (a 500, a
// takeover) makes the processor act a second time. The lock file records
// no effects, so generate takes the rename in silence.
func TestAttackLockFlagsEffectRename(t *testing.T) {
	before := effectsSpec(`{effects: [{name: charge, keyRetention: 24h, maxKeyLength: 255}]}`)
	after := effectsSpec(`{effects: [{name: stripe_charge, keyRetention: 24h, maxKeyLength: 255}]}`)
	if diags := breakingAfter(t, before, after); !model.HasErrors(diags) {
		t.Errorf("renaming the effect charge to stripe_charge changes the key every processor sees for a retry, and is generated without an error:\n%s", diagText(diags))
	}
}

// TestAttackLockFlagsShorterKeyMaxLength: lowering keyMaxLength makes a
// retry of a request made before the deploy, whose key was valid then, a
// 400 invalid-idempotency-key; a client that obeys makes a new key, and
// the request runs twice. It is the same harm as a changed key source,
// which is refused, but it is not in the lock file and goes through in
// silence.
func TestAttackLockFlagsShorterKeyMaxLength(t *testing.T) {
	before := effectsSpec(`{keyMaxLength: 64}`)
	after := effectsSpec(`{keyMaxLength: 32}`)
	if diags := breakingAfter(t, before, after); len(diags) == 0 {
		t.Errorf("keyMaxLength 64 → 32 refuses retries of stored 33..64-character keys, and is generated without a word")
	}
}

// TestAttackDiagnosticsStayOnOneLine: a diagnostic quotes the spec's
// text (an operationId, a property name), and it is printed to a
// terminal or a CI log. A newline or an escape sequence in that text
// must not reach the output raw: with one, a spec prints a line of its
// choosing, such as a GitHub Actions workflow command
// ("::error file=main.go,line=1::…") or a forged "0 errors" summary.
func TestAttackDiagnosticsStayOnOneLine(t *testing.T) {
	spec := `{"openapi":"3.0.3","info":{"title":"t","version":"1"},
 "paths":{"/pay":{"post":{"operationId":"pay\n::error file=main.go,line=1::forged\u001b[2K",
    "x-idempotency":{"fingerprint":["/nope"]},
    "requestBody":{"content":{"application/json":{"schema":{"type":"object","properties":{"a":{"type":"string"}}}}}},
    "responses":{"200":{"description":"ok"}}}}}}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	_, rep, err := Validate(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	if !model.HasErrors(rep.Diagnostics) {
		t.Fatalf("the missing fingerprint field is not reported:\n%s", diagText(rep.Diagnostics))
	}
	for _, d := range rep.Diagnostics {
		line := d.String()
		if i := strings.IndexFunc(line, unicode.IsControl); i >= 0 {
			t.Errorf("diagnostic holds the control character %q from the spec at byte %d:\n%s", line[i], i, line)
		}
	}
}

// TestAttackLockFlagsBasePathChange: moving an operation to another path
// is refused (policy-removed: requests to the old path are no longer
// protected), but moving every operation at once by changing the prefix
// the spec's servers give is not: the lock records paths without the
// base path, so servers /v1 → /v2 regenerates BasePath in silence, and a
// service still mounted at /v1 (clients and retries still call
// /v1/charges) has every request pass the engine as a path it does not
// know, unprotected.
func TestAttackLockFlagsBasePathChange(t *testing.T) {
	spec := func(server string) string {
		return `openapi: 3.0.3
info: {title: t, version: "1"}
servers: [{url: "` + server + `"}]
paths:
  /charges:
    post:
      operationId: createCharge
      x-idempotency: true
      responses: {"200": {description: ok}}
`
	}
	if diags := breakingAfter(t, spec("https://api.example.com/v1"), spec("https://api.example.com/v2")); len(diags) == 0 {
		t.Errorf("the base path went from /v1 to /v2, moving every protected route, and generate says nothing")
	}
}

// TestAttackOutputsDoNotOverwriteEachOther: two outputs with one path,
// or an output at the spec's own path, are a mistake in the options that
// generate carries out: --docs openapi.yaml writes the Markdown page over
// the spec, --docs api/idempotency.lock.json over the lock file. The
// client directory equal to the Go directory is refused already; these
// should be too.
func TestAttackOutputsDoNotOverwriteEachOther(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay:
    post:
      operationId: pay
      x-idempotency: true
      responses: {"200": {description: ok}}
`
	for _, docs := range []string{"openapi.yaml", "api/idempotency.lock.json", "api/idempotency.idem.go"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		files, diags, err := Generate(context.Background(), Options{Spec: "openapi.yaml", Out: "api", Package: "api", Docs: docs, Dir: dir})
		if err != nil || model.HasErrors(diags) {
			t.Logf("--docs %s: refused: %v %s", docs, err, diagText(diags))
			continue // refused
		}
		t.Errorf("--docs %s is generated over another file (%d files, the page among them), and nothing refuses it", docs, len(files))
	}
}

// TestAttackKeyHeaderTheServerNeverShows: a key header that net/http's
// server takes out of Request.Header (Host into Request.Host,
// Transfer-Encoding and Trailer into the body's framing, Expect into
// its own handling) is never there for the engine to read: with
// key: header:Host every request counts as keyless, so the declared
// policy never applies (the generated engine, mounted on an httptest
// server, ran the handler twice for two identical requests with one
// Host). A credential header as the key (Authorization, Cookie) stores
// every caller's secret in the key table and in `idemgen keys list`,
// and headers that are fresh on every attempt (request and trace ids,
// which a gateway sets) never match a retry. replayHeaders refuses such
// headers already (idemstore.NeverStored); the key source takes them.
func TestAttackKeyHeaderTheServerNeverShows(t *testing.T) {
	for _, h := range []string{"Host", "Transfer-Encoding", "Trailer", "Expect", "Authorization", "Cookie", "Proxy-Authorization", "X-Request-Id", "Traceparent"} {
		t.Run(h, func(t *testing.T) {
			spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay:
    post:
      operationId: pay
      x-idempotency: {key: "header:` + h + `"}
      responses: {"200": {description: ok}}
`
			if _, diags := generateIn(t, t.TempDir(), spec, Options{}); !model.HasErrors(diags) {
				t.Errorf("key: header:%s is generated (diagnostics: %q)", h, diagText(diags))
			}
		})
	}
}

// TestAttackUnannotatedRouteIsNotShadowed: POST /pay/{id} has a policy
// (required key, fingerprint [/amount]) and POST /pay/batch, a more
// specific route of the same method, has none. The router sends
// /pay/batch to the batch handler, but the generated engine knows only
// the annotated template, and /pay/{id} matches /pay/batch: capture's
// policy is applied to batch. Mounted with Engine.Middleware over a
// ServeMux serving both, a keyless batch request got 400
// missing-idempotency-key, and a second batch request with another body
// under the same key got the first one's stored answer
// (Idempotent-Replayed: true) and never ran, since the fingerprint reads
// only /amount. The generator sees both operations: it must tell the
// engine that /pay/batch is not capture's, or refuse.
func TestAttackUnannotatedRouteIsNotShadowed(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay/{id}:
    post:
      operationId: capture
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      x-idempotency: {required: true, fingerprint: [/amount]}
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {amount: {type: integer}}}
      responses: {"200": {description: ok}}
  /pay/batch:
    post:
      operationId: batch
      responses: {"200": {description: ok}}
`
	files, diags := generateIn(t, t.TempDir(), spec, Options{})
	if len(diags) > 0 {
		return // reported: fine
	}
	if src := string(files["api/idempotency.idem.go"]); !strings.Contains(src, `"/pay/batch"`) {
		t.Errorf("POST /pay/batch, which has no policy, is matched by POST /pay/{id}'s template in the generated engine, and nothing says so")
	}
}
