package idem_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// failingSealer seals with an AES-GCM key until fail is set, then fails
// every seal, as a key service that went away does.
type failingSealer struct {
	*idemstore.AESGCM
	fail atomic.Bool
}

func (s *failingSealer) Seal(plaintext, aad []byte) (string, []byte, error) {
	if s.fail.Load() {
		return "", nil, errors.New("key service unavailable")
	}
	return s.AESGCM.Seal(plaintext, aad)
}

// sealedLooseEngine is newLooseEngine's engine with a Sealer.
func sealedLooseEngine(t *testing.T) (*looseEngine, *failingSealer) {
	t.Helper()
	aead, err := idemstore.NewAESGCM(idemstore.SealKey{ID: "k1", Key: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	sealer := &failingSealer{AESGCM: aead}
	le := &looseEngine{store: &beginStore{txStore: &txStore{memstore.New()}}}
	p := transferPolicy()
	p.Transactional, p.Required = true, false
	e := newEngine(t, idem.Config{Store: le.store, Policies: []idem.Policy{p}, Sealer: sealer})
	le.h = e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Mode") == "strict" {
			if _, err := idem.TxFor[string](r.Context(), "createTransfer"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		le.ran.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	return le, sealer
}

// In durable mode the handler writes around its transaction. When its
// response cannot be sealed, nothing can be stored and the key is marked
// indeterminate. The client must be told the outcome is unknown (never 503
// "did not process the request, retry", since the handler's writes stand),
// and every retry meets outcome-unknown too.
func TestDurableModeSealFailureIsOutcomeUnknown(t *testing.T) {
	for _, mode := range []string{"idle", "strict"} {
		t.Run(mode, func(t *testing.T) {
			le, sealer := sealedLooseEngine(t)
			le.flag(t)
			sealer.fail.Store(true)
			w := le.post(t, "k-"+mode, mode)
			expect(t, w, http.StatusInternalServerError, problem.OutcomeUnknown)
			sealer.fail.Store(false)
			again := le.post(t, "k-"+mode, mode)
			expect(t, again, http.StatusConflict, problem.OutcomeUnknown)
			if n := le.ran.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2 (the flag and the first attempt)", n)
			}
		})
	}
}

// A keyless request stores nothing, so a Sealer that fails has nothing to
// refuse it for. In durable mode, where the handler has already written
// around its transaction, it must get the handler's answer, not a 503 "did
// not process the request" that invites the client to send it again.
func TestKeylessRequestIsNotSealed(t *testing.T) {
	le, sealer := sealedLooseEngine(t)
	sealer.fail.Store(true)
	if w := le.post(t, "", "strict"); w.Code != http.StatusCreated {
		t.Fatalf("keyless transactional request with a failing Sealer: %d %s, want 201", w.Code, w.Body)
	}
	sealer.fail.Store(false)
	le.flag(t)
	sealer.fail.Store(true)
	for _, mode := range []string{"idle", "strict"} {
		if w := le.post(t, "", mode); w.Code != http.StatusCreated {
			t.Fatalf("keyless %s request in durable mode with a failing Sealer: %d %s, want 201", mode, w.Code, w.Body)
		}
	}
}
