package load

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/generator/model"
)

// sharedSpec returns the path of a public spec kept beside the repository,
// or skips the test.
func sharedSpec(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "..", "shared", "specs", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("real-world spec %s not available (expected at ../shared/specs beside the repository): %v", name, err)
	}
	return p
}

func TestLoadRealSpecsWithoutPolicies(t *testing.T) {
	for _, name := range []string{"adyen-CheckoutService-v71.json", "stripe-spec3.yaml", "oai-petstore.yaml", "oai-petstore-expanded.yaml"} {
		t.Run(name, func(t *testing.T) {
			spec, diags, err := Load(context.Background(), sharedSpec(t, name), Options{DisplayName: name})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diags {
				if d.Severity == model.Error {
					t.Errorf("unexpected error: %s", d)
				}
			}
			if spec == nil {
				t.Fatal("spec is nil")
			}
			if len(spec.Operations) != 0 {
				t.Errorf("got %d operations, want none", len(spec.Operations))
			}
			if spec.Title == "" {
				t.Error("no title")
			}
		})
	}
}

// annotateAllPosts inserts "x-idempotency: true" under every post: of a
// block-style YAML spec and a document-level default, by editing the text,
// which keeps the test independent of the loader.
func annotateAllPosts(t testing.TB, data []byte) ([]byte, int) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(    )post:\n`)
	n := len(re.FindAll(data, -1))
	out := re.ReplaceAll(data, []byte("${1}post:\n${1}  x-idempotency: true\n"))
	head := []byte("x-idempotency:\n  key: header:Idempotency-Key\n  ttl: 24h\n")
	return append(head, out...), n
}

func TestLoadStripeAllPostsAnnotated(t *testing.T) {
	data, err := os.ReadFile(sharedSpec(t, "stripe-spec3.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	annotated, n := annotateAllPosts(t, data)
	if n != 222 {
		t.Fatalf("found %d POST operations in the Stripe spec, want 222", n)
	}
	path := filepath.Join(t.TempDir(), "stripe.yaml")
	if err := os.WriteFile(path, annotated, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	spec, diags, err := Load(context.Background(), path, Options{DisplayName: "stripe.yaml"})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	warnings := 0
	for _, d := range diags {
		if d.Severity == model.Error {
			t.Errorf("unexpected error: %s", d)
		} else {
			warnings++
		}
	}
	if spec == nil {
		t.Fatal("spec is nil")
	}
	if len(spec.Operations) != n {
		t.Fatalf("got %d operations, want %d", len(spec.Operations), n)
	}
	goNames := map[string]bool{}
	for i, op := range spec.Operations {
		if op.Method != "POST" || op.Policy.KeyName != "Idempotency-Key" || op.Policy.TTL != 24*time.Hour {
			t.Errorf("operation %d = %+v", i, op)
		}
		if goNames[op.GoName] {
			t.Errorf("Go name %s twice", op.GoName)
		}
		goNames[op.GoName] = true
		if i > 0 && (spec.Operations[i-1].Path > op.Path) {
			t.Errorf("operations not sorted: %s before %s", spec.Operations[i-1].Path, op.Path)
		}
	}
	t.Logf("Load: %v, %d operations, %d warnings", elapsed, len(spec.Operations), warnings)
}

// BenchmarkLoadStripe compares Load on the Stripe spec, every POST
// annotated, with kin-openapi loading the same bytes on its own.
func BenchmarkLoadStripe(b *testing.B) {
	data, err := os.ReadFile(sharedSpec(b, "stripe-spec3.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	annotated, _ := annotateAllPosts(b, data)
	path := filepath.Join(b.TempDir(), "stripe.yaml")
	if err := os.WriteFile(path, annotated, 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("kin", func(b *testing.B) {
		for b.Loop() {
			l := openapi3.NewLoader()
			if _, err := l.LoadFromData(bytes.Clone(annotated)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kin-origin", func(b *testing.B) {
		for b.Loop() {
			l := openapi3.NewLoader()
			l.IncludeOrigin = true
			if _, err := l.LoadFromData(bytes.Clone(annotated)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := Load(context.Background(), path, Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeMatchesKinLoader checks that decoding kin's document from the
// loader's own node tree yields the document kin-openapi's loader builds
// from the same bytes.
func TestDecodeMatchesKinLoader(t *testing.T) {
	for _, name := range []string{"oai-petstore-expanded.yaml", "adyen-CheckoutService-v71.json", "stripe-spec3.yaml"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(sharedSpec(t, name))
			if err != nil {
				t.Fatal(err)
			}
			want, err := openapi3.NewLoader().LoadFromData(bytes.Clone(data))
			if err != nil {
				t.Fatal(err)
			}
			tr, err := parseTree(data, name)
			if err != nil {
				t.Fatal(err)
			}
			tr.neutralizeRefs()
			if len(tr.refs) != 0 {
				t.Errorf("broken refs in a spec kin loads: %+v", tr.refs)
			}
			got := &openapi3.T{}
			if err := got.UnmarshalYAML(tr.root); err != nil {
				t.Fatal(err)
			}
			if err := openapi3.NewLoader().ResolveRefsIn(got, nil); err != nil {
				t.Fatal(err)
			}
			wantJSON, err := want.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			gotJSON, err := got.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(wantJSON, gotJSON) {
				t.Errorf("documents differ (%d and %d bytes of JSON)", len(wantJSON), len(gotJSON))
			}
		})
	}
}

func TestDecodeMatchesKinLoaderOnYAMLOddities(t *testing.T) {
	data := []byte(`openapi: 3.0.3
info: {title: t, version: "1.0"}
x-released: 2020-06-11T16:32:50-03:00
x-note: !md hello
paths:
  /x:
    post:
      responses:
        200:
          description: ok
          content:
            application/json:
              example: {when: 2021-01-01, 1: one, true: yes}
        default: {description: other}
`)
	want, err := openapi3.NewLoader().LoadFromData(bytes.Clone(data))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := parseTree(data, "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := &openapi3.T{}
	if err := got.UnmarshalYAML(tr.root); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := want.MarshalJSON()
	gotJSON, err := got.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wantJSON, gotJSON) {
		t.Errorf("documents differ:\nkin:  %s\nours: %s", wantJSON, gotJSON)
	}
}
