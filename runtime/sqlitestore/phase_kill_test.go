package sqlitestore_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
	"github.com/idemgen/idemgen/runtime/storetest/proc"
)

// The phase kill test's child: phaseHelperEnv names the point it is killed
// at, phaseHelperDBEnv its database, phaseHelperProcEnv the processor.
const (
	phaseHelperEnv     = "IDEMGEN_SQLITESTORE_PHASE_HELPER"
	phaseHelperDBEnv   = "IDEMGEN_SQLITESTORE_PHASE_DB"
	phaseHelperProcEnv = "IDEMGEN_SQLITESTORE_PHASE_PROCESSOR"
)

// phaseKillPolicy is the operation of the phase kill test: not
// transactional (SQLite records no phase beside a handler's transaction),
// taken over when its lease runs out.
func phaseKillPolicy() idem.Policy {
	return enginetest.EnginePolicy("createCharge", "/charges", 500*time.Millisecond, idemstore.Takeover, false)
}

// openPhaseDB opens the store on path with the key and phase tables.
func openPhaseDB(t *testing.T, path string, opts ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPhaseHelperProcess is the body of the child of
// TestKillAroundPhaseRecord when phaseHelperEnv is set: its request is
// killed at the point that names.
func TestPhaseHelperProcess(t *testing.T) {
	point := os.Getenv(phaseHelperEnv)
	if point == "" {
		t.Skip("runs only as a child process of TestKillAroundPhaseRecord")
	}
	s := openPhaseDB(t, os.Getenv(phaseHelperDBEnv))
	es := enginetest.ServeEngine(t, s, proc.PhaseHandler(os.Getenv(phaseHelperProcEnv), nil), phaseKillPolicy())
	es.MustPost(t, "/charges", "k-charge", `{"amount":500}`, "X-Hang", point)
	t.Fatal("child was not killed")
}

// kill -9 of a handler after it charged the processor, once before the
// charge's phase was recorded and once after. The service restarts on the
// database (ending the dead process's leases, WithDeadHolderRecovery) and
// the retry takes the key over: it skips a recorded phase, and calls the
// processor again only when the record was never made, with the same
// effect key. One charge per request with a processor that honours keys;
// no second call at all after a recorded phase, even at one that does not.
func TestKillAroundPhaseRecord(t *testing.T) {
	for _, tc := range []struct {
		point  string
		honour bool
	}{
		{proc.HangAfterCall, true},
		{proc.HangAfterRecord, false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			p := proc.NewProcessor(t, tc.honour)
			path := filepath.Join(t.TempDir(), "idem.db")
			if err := openPhaseDB(t, path).Close(); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestPhaseHelperProcess$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), phaseHelperEnv+"="+tc.point, phaseHelperDBEnv+"="+path, phaseHelperProcEnv+"="+p.URL())
			cmd.Stderr = os.Stderr
			proc.StartUntilReady(t, cmd)
			kill9(t, cmd)

			s := openPhaseDB(t, path, sqlitestore.WithDeadHolderRecovery())
			restarted := enginetest.ServeEngine(t, s, proc.PhaseHandler(p.URL(), nil), phaseKillPolicy())
			var a enginetest.Answer
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				a = restarted.MustPost(t, "/charges", "k-charge", `{"amount":500}`)
				if a.Status != http.StatusConflict || time.Now().After(deadline) {
					break
				}
			}
			if a.Status != http.StatusCreated {
				t.Fatalf("retry after the kill: %v", a)
			}
			proc.CheckPhaseKill(t, p, tc.point, a.Body)
		})
	}
}
