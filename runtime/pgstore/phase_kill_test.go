package pgstore_test

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
	"github.com/idemgen/idemgen/runtime/storetest/proc"
)

// helperProcessorEnv gives the phase kill test's child the processor's URL.
const helperProcessorEnv = "IDEMGEN_PGSTORE_HELPER_PROCESSOR"

const phaseBody = `{"amount":500}`

// phasePolicy is the transactional operation of the phase kill tests.
func phasePolicy() idem.Policy {
	return enginetest.EnginePolicy("createCharge", "/charges", 500*time.Millisecond, idemstore.Takeover, true)
}

// phaseServer serves phasePolicy with proc.PhaseHandler, whose business
// write goes through the request's transaction.
func phaseServer(t *testing.T, s *pgstore.Store, url string) *enginetest.EngineServer {
	write := func(r *http.Request) error {
		tx, err := idem.TxFor[pgx.Tx](r.Context(), "createCharge")
		if err != nil {
			return err
		}
		return writeEffect(r.Context(), tx, r.Header.Get("Idempotency-Key"))
	}
	return enginetest.ServeEngine(t, s, proc.PhaseHandler(url, write), phasePolicy())
}

// helperPhase is the child of TestKillAroundPhaseRecord: its request is
// killed at the point its mode names.
func helperPhase(t *testing.T, s *pgstore.Store, point string) {
	es := phaseServer(t, s, os.Getenv(helperProcessorEnv))
	es.MustPost(t, "/charges", "k-charge", phaseBody, "X-Hang", point)
	t.Fatal("child was not killed")
}

// kill -9 of a transactional handler after it charged the processor, once
// before the charge's phase was recorded and once after. The phase's
// record committed on its own connection; the handler's transaction and
// claim died with the process. The retry, in the restarted service,
// skips a recorded phase, and calls the processor again only when the
// record was never made, with the same effect key: one charge per request
// with a processor that honours keys, and no second call at all after a
// recorded phase, even at a processor that does not. The business write
// commits once, with the retry's key.
func TestKillAroundPhaseRecord(t *testing.T) {
	testURL(t)
	for _, tc := range []struct {
		point  string
		honour bool
	}{
		{proc.HangAfterCall, true},
		{proc.HangAfterRecord, false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			p := proc.NewProcessor(t, tc.honour)
			schema := newSchema(t)
			pool := openPool(t, schema)
			cmd := helperCommand(t, "phase-"+tc.point, schema, helperProcessorEnv+"="+p.URL())
			proc.StartUntilReady(t, cmd)
			killChild(t, cmd)

			restarted := phaseServer(t, pgstore.New(pool), p.URL())
			var a enginetest.Answer
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				a = restarted.MustPost(t, "/charges", "k-charge", phaseBody)
				if a.Status != http.StatusConflict || time.Now().After(deadline) {
					break
				}
			}
			if a.Status != http.StatusCreated {
				t.Fatalf("retry after the kill: %v", a)
			}
			proc.CheckPhaseKill(t, p, tc.point, a.Body)
			if n, err := countEffects(context.Background(), pool, "k-charge"); err != nil || n != 1 {
				t.Errorf("committed business writes = %d, %v; want 1 (the retry's)", n, err)
			}
		})
	}
}
