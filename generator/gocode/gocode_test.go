package gocode

import (
	"bytes"
	"go/format"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

// paymentsSpec is the example service's two main operations, written by
// hand so that the emitter is tested without the loader.
func paymentsSpec() *model.Spec {
	return &model.Spec{
		Source: "openapi.yaml",
		Operations: []model.Operation{
			{
				ID: "createTransfer", GoName: "CreateTransfer", Method: "POST", Path: "/transfers",
				BodyMediaType: "application/json",
				Policy: model.Policy{
					Scope: "operation", KeyIn: key.InHeader, KeyName: "Idempotency-Key", KeyMaxLength: 255,
					Required: true, TTL: 7 * 24 * time.Hour, Lease: 15 * time.Second, MaxSnapshotBytes: 1 << 20,
					OnLeaseExpiry: "takeover", Transactional: true,
					Fingerprint: []model.Field{
						{Pointer: "/amount", Type: model.TypeInteger},
						{Pointer: "/currency", Type: model.TypeString},
						{Pointer: "/from_account", Type: model.TypeString},
						{Pointer: "/to_account", Type: model.TypeString},
					},
				},
			},
			{
				ID: "createAdoption", GoName: "CreateAdoption", Method: "POST", Path: "/pets/{pet_id}/adoptions",
				PathParams: []string{"pet_id"}, BodyMediaType: "application/json",
				Policy: model.Policy{
					Scope: "tenant", KeyIn: key.InBody, KeyName: "/idempotency_key", KeyMaxLength: 64,
					TTL: 24 * time.Hour, Lease: 90 * time.Second, MaxSnapshotBytes: 64 << 10,
					ReplayHeaders: []string{"X-Request-Cost"}, CacheServerErrors: true,
					OnLeaseExpiry: "fail-closed", Query: []string{"dry_run"},
				},
			},
		},
	}
}

func TestEmitPayments(t *testing.T) {
	src, diags, err := Emit(paymentsSpec(), Options{Package: "api", Source: "../openapi.yaml"})
	if err != nil || len(diags) > 0 {
		t.Fatalf("Emit: %v %v", err, diags)
	}
	out := string(src)
	t.Log("\n" + out)
	wantHeader := Header + "\n// source: ../openapi.yaml\n\npackage api\n"
	if !strings.HasPrefix(out, wantHeader) {
		t.Errorf("output does not start with %q:\n%s", wantHeader, out)
	}
	for _, want := range []string{
		"TTL:               7 * 24 * time.Hour,",
		"Lease:             15 * time.Second,",
		"MaxSnapshotBytes:  1 << 20,",
		"MaxSnapshotBytes:  64 << 10,",
		"Lease:             90 * time.Second,",
		"TTL:               24 * time.Hour,",
		`{Pointer: "/amount", Type: fingerprint.Integer},`,
		`MediaType: "application/json",`,
		`Exclude:   "/idempotency_key",`,
		`Path:      []string{"pet_id"},`,
		`Query:     []string{"dry_run"},`,
		`ReplayHeaders:     []string{"X-Request-Cost"},`,
		"Scope:             idem.ScopeTenant,",
		"OnLeaseExpiry:     idemstore.FailClosed,",
		`return idem.TxHandler("createTransfer", h)`,
		"func CreateTransfer[Tx any](h func(w http.ResponseWriter, r *http.Request, tx Tx)) http.Handler {",
		`OpCreateTransfer = "createTransfer"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Only the transactional operation gets an adapter.
	if strings.Contains(out, "func CreateAdoption[") {
		t.Error("non-transactional operation got an adapter")
	}
	// Policies lists operations sorted by path: /pets… before /transfers.
	i, j := strings.Index(out, "\t\tCreateAdoptionPolicy(),"), strings.Index(out, "\t\tCreateTransferPolicy(),")
	if i < 0 || j < 0 || i > j {
		t.Errorf("Policies not sorted by path (adoption at %d, transfer at %d)", i, j)
	}
	if _, err := parser.ParseFile(token.NewFileSet(), "x.go", src, parser.ParseComments); err != nil {
		t.Errorf("output does not parse: %v", err)
	}
	if formatted, err := format.Source(src); err != nil || !bytes.Equal(formatted, src) {
		t.Errorf("output is not gofmt-clean (err %v)", err)
	}
	if !strings.Contains(out, "import (\n\t\"context\"\n\t\"net/http\"\n\t\"time\"\n\n\t\"github.com/idemgen/idemgen/runtime/fingerprint\"\n") {
		t.Errorf("imports are not grouped standard library first")
	}
}

func TestEmitDeterministic(t *testing.T) {
	spec := paymentsSpec()
	first, _, err := Emit(spec, Options{Package: "api", Source: "s.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	// Reverse the input order: the output must not depend on it.
	spec.Operations[0], spec.Operations[1] = spec.Operations[1], spec.Operations[0]
	for range 5 {
		again, _, err := Emit(spec, Options{Package: "api", Source: "s.yaml"})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("two runs differ:\n%s\n---\n%s", first, again)
		}
	}
}

func TestEmitEmptySpec(t *testing.T) {
	src, _, err := Emit(&model.Spec{}, Options{Package: "api", Source: "s.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(src), `"net/http"`) || strings.Contains(string(src), `"time"`) {
		t.Errorf("empty spec imports unused packages:\n%s", src)
	}
	if !strings.Contains(string(src), "return nil") {
		t.Errorf("Policies of an empty spec should return nil:\n%s", src)
	}
}

func TestEmitBadPackage(t *testing.T) {
	for _, name := range []string{"", "1api", "my-api", "_"} {
		if _, _, err := Emit(&model.Spec{}, Options{Package: name}); err == nil {
			t.Errorf("package %q accepted", name)
		}
	}
}

func TestEmitNameClash(t *testing.T) {
	spec := paymentsSpec()
	// An operation named NewEngine would declare its adapter over the
	// engine constructor; one named CreateTransferPolicy... no: a
	// transactional "X" and an operation "XPolicy" clash too.
	spec.Operations = append(spec.Operations, model.Operation{
		ID: "newEngine", GoName: "NewEngine", Method: "POST", Path: "/engines",
		Policy: model.Policy{Transactional: true},
	}, model.Operation{
		ID: "createTransferPolicy", GoName: "CreateTransferPolicy", Method: "POST", Path: "/z",
		Policy: model.Policy{Transactional: true},
	})
	_, diags, err := Emit(spec, Options{Package: "api", Source: "s.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(diags) != 2 {
		t.Fatalf("got %d diagnostics, want 2: %v", len(diags), diags)
	}
	for _, d := range diags {
		if d.Severity != model.Error || !strings.Contains(d.Message, "clashes with") {
			t.Errorf("unexpected diagnostic %+v", d)
		}
	}
}

func TestDurationAndSizeCode(t *testing.T) {
	render := func(c jen.Code) string { return strings.TrimSpace(jen.Null().Add(c).GoString()) }
	durations := map[time.Duration]string{
		7 * 24 * time.Hour:      "7 * 24 * time.Hour",
		24 * time.Hour:          "24 * time.Hour",
		36 * time.Hour:          "36 * time.Hour",
		time.Hour:               "time.Hour",
		90 * time.Minute:        "90 * time.Minute",
		90 * time.Second:        "90 * time.Second",
		time.Second:             "time.Second",
		1500 * time.Millisecond: "1500 * time.Millisecond",
		3:                       "time.Duration(3)",
		0:                       "0",
	}
	for d, want := range durations {
		if got := render(DurationCode(d)); got != want {
			t.Errorf("DurationCode(%v) = %q, want %q", d, got, want)
		}
	}
	sizes := map[int64]string{
		1 << 20: "1 << 20", 64 << 10: "64 << 10", 3 << 30: "3 << 30",
		1536: "1536", 1000: "1000", 2048: "2 << 10",
	}
	for n, want := range sizes {
		if got := render(SizeCode(n)); got != want {
			t.Errorf("SizeCode(%d) = %q, want %q", n, got, want)
		}
	}
}
