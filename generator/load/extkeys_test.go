package load

import (
	"context"
	"strings"
	"testing"
)

func TestExtensionLookalike(t *testing.T) {
	for name, want := range map[string]lookalike{
		"x-idempotency":                notLookalike,
		"x-idempotency-key":            notLookalike,
		"x-amazon-apigateway":          notLookalike,
		"X-Idempotency":                otherCase,
		"x-IDEMPOTENCY":                otherCase,
		"X-Idempotancy":                nearMiss,
		"x-ıdempօteոcy":                confusable, // dotless ı, Armenian օ and ո
		"x-idémpotency":                confusable, // an accent
		"x-i\u0307dempotency":          confusable, // a combining dot
		"x-ıdempotancy":                nearMiss,   // and a typo
		"x-ıdempotency-key":            notLookalike,
		"説明説明説明説明説明説明説":                notLookalike,
		"x-idempotent":                 nearMiss,
		"x-idempotancy":                nearMiss,
		"х-іdеmроtеnсу":                confusable, // Cyrillic
		"x-idεmpοtency":                confusable, // Greek
		"x‐idempotency":                confusable, // U+2010 hyphen
		"ｘ-ｉｄｅｍｐｏｔｅｎｃｙ":                confusable, // fullwidth
		"x-idem\u200dpotency":          confusable, // zero-width joiner
		"х-іdеmроtеnt":                 nearMiss,
		"\u0445-\u0456dempotency-keys": notLookalike,
	} {
		if got := extensionLookalike(name); got != want {
			t.Errorf("extensionLookalike(%q) = %d, want %d", name, got, want)
		}
	}
}

// An x-idempotency idemgen does not read is reported where it stands:
// one spelt with look-alike letters, one among an operation's members,
// and one in additionalOperations. Names and data that merely hold the
// word are left alone.
func TestUnreadExtensionsAreReported(t *testing.T) {
	src := `openapi: 3.2.0
info: {title: t, version: "1"}
paths:
  /pay:
    parameters:
      - {name: a, in: query, x-idempotency: true, schema: {type: string}}
    additionalOperations:
      PATCH: {x-idempotency: true, responses: {"200": {description: ok}}}
      LINK: {x-idempotency: true, responses: {"200": {description: ok}}}
      UNLINK: {x-idempotency: false, responses: {"200": {description: ok}}}
    post:
      operationId: pay
      х-іdеmроtеnсу: true
      requestBody:
        x-idempotency: true
        content:
          application/json:
            example: {x-idempotency: 1}
            schema: {type: object, properties: {x-idempotency: {type: string}}, x-note: {x-idempotency: 1}}
      responses:
        "200": {description: ok}
        x-idempotency: true
      callbacks:
        done: {"{$request.body#/url}": {post: {x-idempotency: true, responses: {"200": {description: ok}}}}}
`
	_, diags, err := LoadData(context.Background(), []byte(src), "spec.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range diags {
		got = append(got, d.String())
	}
	wantDiags(t, got,
		`spec.yaml:6:30: error: x-idempotency inside the path item /pay's parameters has no effect: idemgen reads it on the operation only (beside operationId); move it there`,
		`spec.yaml:8:15: error: x-idempotency on PATCH /pay in additionalOperations is not read: OpenAPI keeps PATCH out of additionalOperations for its own field, patch:; move the operation there`,
		`spec.yaml:9:14: error: x-idempotency is not allowed on LINK /pay in additionalOperations: idemgen protects POST and PATCH operations only; remove the extension`,
		`spec.yaml:13:7: error: `+"х-іdеmроtеnсу"+` reads as x-idempotency but is another key: it is spelt with characters that only look like its own (U+0445, U+0456, U+0435, U+0440, U+043E, U+0441, U+0443), and idemgen reads the extension spelt in ASCII only, so the policy would be ignored; type it again in ASCII`,
		`spec.yaml:15:9: error: x-idempotency inside POST /pay's requestBody has no effect: idemgen reads it on the operation only (beside operationId); move it there`,
		`spec.yaml:22:9: error: x-idempotency inside POST /pay's responses has no effect: idemgen reads it on the operation only (beside operationId); move it there`,
	)
	if t.Failed() {
		t.Log(strings.Join(got, "\n"))
	}
}
