package sqlitestore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// phaseTarget is target with the phases' migration applied.
var phaseTarget = storetest.Target{Open: func(t *testing.T, clock *storetest.Clock) storetest.Instance {
	in := openTarget(t, clock)
	if err := in.Store.(*sqlitestore.Store).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return in
}}

func TestPhases(t *testing.T) {
	storetest.RunPhases(t, phaseTarget)
}

// Without the phases' migration a phase fails saying which table is
// missing, and the sweeper goes on sweeping keys.
func TestPhasesWithoutTheirTable(t *testing.T) {
	s := openStore(t)
	id := idemstore.Identity{Tenant: "t", Scope: "op", Key: "k"}
	_, err := s.RecordPhase(context.Background(), id, "charge", []byte("x"), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "idempotency_phases table does not exist") {
		t.Fatalf("RecordPhase without the table: %v", err)
	}
	if _, err := s.Sweep(context.Background(), 10); err != nil {
		t.Fatalf("Sweep without the phases table: %v", err)
	}
	if ps, err := s.ListPhases(context.Background(), id); err != nil || len(ps) != 0 {
		t.Fatalf("ListPhases without the phases table = %v, %v; want none", ps, err)
	}
}

// A transactional SQLite operation cannot record a phase beside the
// handler's transaction, which holds the only write lock: Phase says so at
// once instead of waiting for a lock its own request holds.
func TestPhaseRefusedInTransaction(t *testing.T) {
	s := openStore(t)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e, err := idem.New(idem.Config{
		Store:    s,
		Policies: []idem.Policy{idemtest.Policy("charge", "/charges", func(p *idem.Policy) { p.Transactional = true })},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	var got error
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := idem.TxFor[*sqlitestore.Tx](r.Context(), "charge"); err != nil {
			t.Error(err)
		}
		_, got = idem.Phase(r.Context(), "charge", func(context.Context, string) ([]byte, error) { return []byte("ch"), nil })
		w.WriteHeader(http.StatusBadGateway)
	}))
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k1")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if !errors.Is(got, idem.ErrNoPhases) {
		t.Fatalf("Phase in a transactional SQLite request: %v, want ErrNoPhases", got)
	}
}

// New refuses a transactional operation that declares a recovery point on
// SQLite, and takes the same declaration on an operation that is not
// transactional.
func TestNewRefusesRecoveryPointInTransaction(t *testing.T) {
	s := openStore(t)
	for _, transactional := range []bool{true, false} {
		_, err := idem.New(idem.Config{
			Store: s,
			Policies: []idem.Policy{idemtest.Policy("charge", "/charges", func(p *idem.Policy) {
				p.Transactional = transactional
				p.Effects = []idem.Effect{{Name: "charge", RecoveryPoint: true}}
			})},
			Tenant: func(*http.Request) (string, bool) { return "acme", true },
		})
		if transactional != (err != nil) {
			t.Errorf("transactional %v: New = %v", transactional, err)
		}
	}
}
