package idem_test

import (
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/problem"
)

// A body whose key member encoding/json would read otherwise than the
// engine is refused before the claim, as a fingerprinted field's would be
// (docs/semantics.md §7.6): a handler that decodes the body must never see
// a key other than the one the request was claimed under.
func TestBodyKeyInAnotherCaseIsRefused(t *testing.T) {
	t.Run("a case variant beside the key", func(t *testing.T) {
		// Claimed as k1 and answered with k1's replay, while encoding/json
		// decodes the last of the two members, k2.
		p := transferPolicy()
		p.Key = idem.KeySource{In: key.InBody, Name: "/idempotency_key"}
		f := newFixture(t, p)
		expect(t, f.do(call{body: `{"idempotency_key":"k1","amount":1000,"to":"acc_2"}`}), http.StatusCreated, "")
		expect(t, f.do(call{body: `{"idempotency_key":"k1","IDEMPOTENCY_KEY":"k2","amount":1000,"to":"acc_2"}`}),
			http.StatusBadRequest, problem.InvalidBody)
		expect(t, f.do(call{body: `{"IDEMPOTENCY_KEY":"k2","idempotency_key":"k1","amount":1000,"to":"acc_2"}`}),
			http.StatusBadRequest, problem.InvalidBody)
		if f.runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", f.runs.Load())
		}
	})
	t.Run("an optional key spelled with the Kelvin sign", func(t *testing.T) {
		// Keyless to an engine that reads names exactly, so every retry
		// ran the handler; encoding/json reads the member as the key.
		p := transferPolicy()
		p.Key = idem.KeySource{In: key.InBody, Name: "/idempotency_key"}
		p.Required = false
		f := newFixture(t, p)
		for range 3 {
			expect(t, f.do(call{body: `{"idempotency_\u212Aey":"k1","amount":1000,"to":"acc_2"}`}),
				http.StatusBadRequest, problem.InvalidBody)
		}
		if f.runs.Load() != 0 || f.store.Len() != 0 {
			t.Fatalf("runs = %d, stored = %d; want the body refused before the handler", f.runs.Load(), f.store.Len())
		}
	})
	t.Run("a case variant on the way to a nested key", func(t *testing.T) {
		p := transferPolicy()
		p.Key = idem.KeySource{In: key.InBody, Name: "/meta/idempotency_key"}
		f := newFixture(t, p)
		expect(t, f.do(call{body: `{"meta":{"idempotency_key":"k1"},"META":{"idempotency_key":"k2"},"amount":1000}`}),
			http.StatusBadRequest, problem.InvalidBody)
		if f.runs.Load() != 0 {
			t.Fatalf("handler ran %d times, want 0", f.runs.Load())
		}
	})
}
