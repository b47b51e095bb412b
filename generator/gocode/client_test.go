package gocode

import (
	"strings"
	"testing"
	"time"
)

// The client table holds each operation's key source, TTL and retry
// budget, and none of the server's settings.
func TestEmitClientTable(t *testing.T) {
	spec := paymentsSpec()
	spec.Operations[0].Policy.ClientRetryBudget = 10 * time.Minute
	src, diags, err := Emit(spec, Options{Package: "api", Source: "../openapi.yaml"})
	if err != nil || len(diags) > 0 {
		t.Fatalf("Emit: %v %v", err, diags)
	}
	out := string(src)
	i := strings.Index(out, "func ClientOperations() []idemclient.Operation {")
	if i < 0 {
		t.Fatalf("no client table in\n%s", out)
	}
	table := out[i:]
	table = table[:strings.Index(table, "\n}\n")]
	for _, want := range []string{
		`"github.com/idemgen/idemgen/runtime/idemclient"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the file lacks %s", want)
		}
	}
	for _, want := range []string{
		"ID:           OpCreateTransfer,",
		`Path:         "/transfers",`,
		`Key:          idemclient.Key{In: idemclient.KeyInHeader, Name: "Idempotency-Key"},`,
		"TTL:          7 * 24 * time.Hour,",
		"RetryBudget:  10 * time.Minute,",
		`Key:          idemclient.Key{In: idemclient.KeyInBody, Name: "/idempotency_key"},`,
		"KeyMaxLength: 64,",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the client table lacks %q:\n%s", want, table)
		}
	}
	for _, server := range []string{"Lease", "Fingerprint", "MaxSnapshotBytes", "Transactional", "Scope"} {
		if strings.Contains(table, server) {
			t.Errorf("the client table holds the server's %s:\n%s", server, table)
		}
	}
	if strings.Count(table, "RetryBudget") != 1 {
		t.Errorf("RetryBudget written for an operation without one:\n%s", table)
	}
}
