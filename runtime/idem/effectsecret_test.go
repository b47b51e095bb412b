package idem_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// chargeServer is a replica over store under cfg (its Store, Policies
// and Tenant filled in) whose handler asks for the "charge" effect key
// and runs the "charge" phase with p, then answers 500 when the request's
// X-End header says so (the key is released, the client retries) and 201
// otherwise; either way its body is the effect key and the phase's result.
func chargeServer(t *testing.T, store idemstore.Store, p *charges, cfg idem.Config) http.Handler {
	t.Helper()
	cfg.Store = store
	cfg.Policies = []idem.Policy{idemtest.Policy("charge", "/charges")}
	cfg.Tenant = func(*http.Request) (string, bool) { return "acme", true }
	e, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := idem.EffectKey(r.Context(), "charge")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		res, err := idem.Phase(r.Context(), "charge", func(_ context.Context, effectKey string) ([]byte, error) {
			return p.charge(effectKey), nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if r.Header.Get("X-End") == "500" {
			// The ledger write failed after the charge: nothing kept,
			// the key released, the client retries.
			w.WriteHeader(http.StatusInternalServerError)
		} else {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = fmt.Fprintf(w, "%s %s", k, res)
	}))
}

// The first deploy of the documented rotation lists the new secret second
// ([old, new]): the new secret is then the list's last entry, and no
// effect key or phase may move to it.
func TestEffectKeyUnchangedByTheRotationsFirstDeploy(t *testing.T) {
	store, p := memstore.New(), &charges{}
	before := chargeServer(t, store, p, idem.Config{Secrets: [][]byte{secretOld}})
	if w := postCharge(before, "transfer-8", "500"); w.Code != http.StatusInternalServerError {
		t.Fatalf("first run: %d %s", w.Code, w.Body)
	}
	first := chargeServer(t, store, p, idem.Config{Secrets: [][]byte{secretOld, secretNew}, EffectSecret: secretOld})
	if w := postCharge(first, "transfer-8", ""); w.Code != http.StatusCreated {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if calls, keys := p.n, len(p.byKey); calls != 1 {
		t.Fatalf("the downstream was called %d times under %d effect keys for one request across the rotation's first deploy: charged twice", calls, keys)
	}
}

// The runbook retires the old secret from Config.Secrets after the
// longest ttl + lease past SecretsRotatedAt. A request begun long after
// the rotation, charged, released and retried once the old secret is
// gone, finds its phase and keeps its effect key.
func TestEffectKeyUnchangedByRetiringTheOldSecret(t *testing.T) {
	store, p := memstore.New(), &charges{}
	rotatedAt := time.Now().Add(-72 * time.Hour) // past every ttl + lease
	both := chargeServer(t, store, p, idem.Config{Secrets: [][]byte{secretNew, secretOld}, SecretsRotatedAt: rotatedAt, EffectSecret: secretOld})
	if w := postCharge(both, "transfer-7", "500"); w.Code != http.StatusInternalServerError {
		t.Fatalf("first run: %d %s", w.Code, w.Body)
	}
	retired := chargeServer(t, store, p, idem.Config{Secrets: [][]byte{secretNew}, SecretsRotatedAt: rotatedAt, EffectSecret: secretOld})
	if w := postCharge(retired, "transfer-7", ""); w.Code != http.StatusCreated {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if calls, keys := p.n, len(p.byKey); calls != 1 {
		t.Fatalf("the downstream was called %d times under %d effect keys for one request across the old secret's retirement: charged twice", calls, keys)
	}
}

// Every step of docs/runtime.md's rotation runbook, and of turning
// secrets on, leaves every effect key and recorded phase where it was: a
// request begun at any step and retried at every later one, on replicas
// of both configurations of each rolling deploy in turn, gets one effect
// key and one phase result, and the downstream is called once.
func TestEffectKeyAndPhaseUnchangedAcrossTheRotationRunbook(t *testing.T) {
	rotatedAt := time.Now()
	long := time.Now().Add(-72 * time.Hour) // past every ttl + lease
	for _, tc := range []struct {
		name string
		// steps are the runbook's deploys, each the configurations live
		// at once while it rolls out: the one before and its own.
		steps [][]idem.Config
	}{
		{"rotation", [][]idem.Config{
			{{Secrets: [][]byte{secretOld}}},
			{{Secrets: [][]byte{secretOld}}, {Secrets: [][]byte{secretOld, secretNew}, EffectSecret: secretOld}},
			{{Secrets: [][]byte{secretOld, secretNew}, EffectSecret: secretOld}, {Secrets: [][]byte{secretNew, secretOld}, EffectSecret: secretOld, SecretsRotatedAt: rotatedAt}},
			{{Secrets: [][]byte{secretNew, secretOld}, EffectSecret: secretOld, SecretsRotatedAt: long}, {Secrets: [][]byte{secretNew}, EffectSecret: secretOld, SecretsRotatedAt: long}},
			{{Secrets: [][]byte{secretNew}, EffectSecret: secretOld, SecretsRotatedAt: long}},
		}},
		{"turning secrets on", [][]idem.Config{
			{{}},
			{{}, {Secrets: [][]byte{secretNew, nil}, UnkeyedEffectKeys: true, SecretsRotatedAt: rotatedAt}},
			{{Secrets: [][]byte{secretNew, nil}, UnkeyedEffectKeys: true, SecretsRotatedAt: long}, {Secrets: [][]byte{secretNew}, UnkeyedEffectKeys: true, SecretsRotatedAt: long}},
			{{Secrets: [][]byte{secretNew}, UnkeyedEffectKeys: true, SecretsRotatedAt: long}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New()
			for begun := range tc.steps {
				p := &charges{}
				k := fmt.Sprintf("transfer-%d", begun)
				first := ""
				for step := begun; step < len(tc.steps); step++ {
					for replica, cfg := range tc.steps[step] {
						w := postCharge(chargeServer(t, store, p, cfg), k, "500")
						if w.Code != http.StatusInternalServerError {
							t.Fatalf("begun at step %d, run at step %d on replica %d: %d %s", begun, step, replica, w.Code, w.Body)
						}
						if first == "" {
							first = w.Body.String()
						}
						if w.Body.String() != first {
							t.Errorf("begun at step %d, run at step %d on replica %d: effect key and phase result %q, first %q", begun, step, replica, w.Body, first)
						}
					}
				}
				if calls, keys := p.n, len(p.byKey); calls != 1 {
					t.Errorf("a request begun at step %d called the downstream %d times under %d effect keys", begun, calls, keys)
				}
			}
		})
	}
}

// New refuses to guess the effect secret of a list under rotation, and a
// choice that cannot stand.
func TestNewRefusesAnEffectSecretItWouldHaveToGuess(t *testing.T) {
	for name, cfg := range map[string]idem.Config{
		"first deploy":      {Secrets: [][]byte{secretOld, secretNew}},
		"second deploy":     {Secrets: [][]byte{secretNew, secretOld}, SecretsRotatedAt: time.Now()},
		"retired":           {Secrets: [][]byte{secretNew}, SecretsRotatedAt: time.Now()},
		"turning on":        {Secrets: [][]byte{secretNew, nil}},
		"short":             {Secrets: [][]byte{secretNew}, EffectSecret: []byte("short")},
		"secret and none":   {Secrets: [][]byte{secretNew}, EffectSecret: secretNew, UnkeyedEffectKeys: true},
		"none without list": {EffectSecret: secretOld, UnkeyedEffectKeys: true},
	} {
		cfg.Store = memstore.New()
		cfg.Tenant = idem.SingleTenant("acme")
		if _, err := idem.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}
