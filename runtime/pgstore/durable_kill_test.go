package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// durableLease is the lease of the durable-mode kill test's operation: long
// enough for the child to reach its write, short enough to wait out.
const durableLease = 500 * time.Millisecond

const durableBody = `{"amount":2500,"currency":"EUR"}`

// durablePolicy is the transactional operation whose handler writes around
// its transaction, in the child and in the parent alike.
func durablePolicy() idem.Policy {
	return enginetest.EnginePolicy("createLoosePayment", "/loose-payments", durableLease, idemstore.Takeover, true)
}

// looseWrites is that operation's handler, mounted without its adapter: by
// X-Mode it writes nothing ("idle", which is how the engine learns that
// the handler does not take its transaction), or writes in a transaction of
// its own from the store ("own"); "own-hang" then says so on stdout and
// waits to be killed.
func looseWrites(s *pgstore.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, mode := r.Header.Get("Idempotency-Key"), r.Header.Get("X-Mode")
		if mode != "idle" {
			if err := writeOwn(r.Context(), s, key); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		if mode == "own-hang" {
			fmt.Println("ready")
			time.Sleep(2 * time.Minute)
		}
		enginetest.Created(w, key)
	})
}

// writeOwn writes marker in a transaction of its own, outside the request's.
func writeOwn(ctx context.Context, s *pgstore.Store, marker string) error {
	own, err := s.Begin(ctx, time.Minute)
	if err != nil {
		return err
	}
	if err := writeEffect(ctx, own.Driver(), marker); err != nil {
		return errors.Join(err, own.Rollback(ctx))
	}
	return own.Commit(ctx, idemstore.Response{})
}

// helperDurable is the child of TestKillDuringDurableModeHandler: its
// engine learns that the handler writes around its transaction, then a
// request's handler writes on its own and hangs until the child is killed.
func helperDurable(t *testing.T, s *pgstore.Store) {
	es := enginetest.ServeEngine(t, s, looseWrites(s), durablePolicy())
	if a := es.MustPost(t, "/loose-payments", "k-flag", durableBody, "X-Mode", "idle"); a.Status != http.StatusCreated {
		t.Fatalf("the request that shows the handler does not take its transaction: %v", a)
	}
	es.MustPost(t, "/loose-payments", "k-durable", durableBody, "X-Mode", "own-hang")
	t.Fatal("child was not killed")
}

// kill -9 while a durable-mode handler runs, after it wrote around its
// transaction. Durable mode lives in the process that saw the handler
// write around its transaction, and died with it; the restarted service
// (here, the parent's engine) has not seen it and claims in a transaction
// with takeover. The key's row records that its claim fails closed, so the
// retry after the lease meets outcome-unknown, and the handler never runs
// again: exactly one effect.
func TestKillDuringDurableModeHandler(t *testing.T) {
	pool, s, cmd := startReadyChild(t, "durable")
	ctx := context.Background()
	killChild(t, cmd)
	killed := time.Now()

	restarted := enginetest.ServeEngine(t, s, looseWrites(s), durablePolicy())
	early := restarted.MustPost(t, "/loose-payments", "k-durable", durableBody, "X-Mode", "own")
	if time.Since(killed) < durableLease {
		// Within the lease the dead request's claim still holds the key.
		if err := enginetest.CheckProblem(early, http.StatusConflict, problem.InProgress, true); err != nil {
			t.Errorf("retry within the lease: %v", err)
		}
	}
	time.Sleep(durableLease + 200*time.Millisecond)
	retry := restarted.MustPost(t, "/loose-payments", "k-durable", durableBody, "X-Mode", "own")
	if err := enginetest.CheckProblem(retry, http.StatusConflict, problem.OutcomeUnknown, false); err != nil {
		t.Errorf("retry after the lease, in the restarted service: %v", err)
	}
	if n, err := countEffects(ctx, pool, "k-durable"); err != nil || n != 1 {
		t.Errorf("committed effects = %d, %v; want exactly 1 (the killed request's)", n, err)
	}
}
