package idem_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func TestNewChecksDeclaredEffects(t *testing.T) {
	charge := idem.Effect{Name: "charge", KeyRetention: 24 * time.Hour, MaxKeyLength: 255, RecoveryPoint: true}
	for _, tc := range []struct {
		name    string
		store   idemstore.Store
		effects []idem.Effect
		want    string // "" for accepted
	}{
		{"accepted", memstore.New(), []idem.Effect{charge, {Name: "receipt"}}, ""},
		{"recovery point without phases", phaselessStore{memstore.New()}, []idem.Effect{charge}, "keeps no phases"},
		{"effect key without phases", phaselessStore{memstore.New()}, []idem.Effect{{Name: "charge"}}, ""},
		{"twice", memstore.New(), []idem.Effect{{Name: "charge"}, {Name: "charge"}}, "declared twice"},
		{"bad name", memstore.New(), []idem.Effect{{Name: "charge card"}}, "invalid effect name"},
		{"short keys", memstore.New(), []idem.Effect{{Name: "charge", MaxKeyLength: 32}}, "at most 32 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := idem.New(idem.Config{
				Store:    tc.store,
				Policies: []idem.Policy{idemtest.Policy("charge", "/charges", func(p *idem.Policy) { p.Effects = tc.effects })},
				Tenant:   func(*http.Request) (string, bool) { return "acme", true },
			})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}
