package model_test

import (
	"testing"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The generator's enums are the runtime's values as the extension spells
// them: the loader accepts exactly these words, and the generated code names
// the runtime constant for each. A value added or respelt on one side only
// fails here.
func TestEnumsAreTheRuntimes(t *testing.T) {
	scopes := map[model.Scope]idem.Scope{
		model.ScopeOperation: idem.ScopeOperation,
		model.ScopeTenant:    idem.ScopeTenant,
	}
	if len(model.Scopes()) != len(scopes) {
		t.Errorf("model.Scopes() = %v, want the %d scopes the runtime has", model.Scopes(), len(scopes))
	}
	for _, s := range model.Scopes() {
		if r, ok := scopes[s]; !ok || string(r) != string(s) {
			t.Errorf("scope %q is %q in the runtime", s, r)
		}
	}

	modes := map[model.LeaseExpiry]idemstore.LeaseExpiry{
		model.Takeover:   idemstore.Takeover,
		model.FailClosed: idemstore.FailClosed,
	}
	if len(model.LeaseExpiries()) != len(modes) {
		t.Errorf("model.LeaseExpiries() = %v, want the %d modes the runtime has", model.LeaseExpiries(), len(modes))
	}
	for _, m := range model.LeaseExpiries() {
		if r, ok := modes[m]; !ok || string(r) != string(m) {
			t.Errorf("onLeaseExpiry %q is %q in the runtime", m, r)
		}
	}
}
