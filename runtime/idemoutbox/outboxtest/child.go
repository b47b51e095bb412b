package outboxtest

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// serveRequests is how many requests a "serve" child commits before the
// one it is killed in.
const serveRequests = 20

// Child is the child process's half of RunKills, for the test binary's
// TestHelperProcess to call: on the database RunKills names in
// tg.HelperEnv, or, that unset, skipped.
func Child(t *testing.T, tg Target) {
	db := os.Getenv(tg.HelperEnv)
	if db == "" {
		t.Skip("the child of the kill tests")
	}
	inst := tg.Open(t, db, maxPayload)
	file := os.Getenv(receiverEnv)
	deliver := fileReceiver(file)
	cfg := runnerConfig(inst.Outbox, nil)
	cfg.Lease, cfg.Batch, cfg.Workers = childLease, 1, 1
	switch mode := os.Getenv(modeEnv); mode {
	case "serve":
		f := &fixture{inst: inst, h: newHandler(inst)}
		f.es = enginetest.ServeEngine(t, inst.Store, f.h, policies(time.Minute)...)
		for i := range serveRequests {
			f.post(t, txPath, "c-"+strconv.Itoa(i), "", http.StatusCreated)
		}
		f.es.MustPost(t, txPath, "u-0", body, "X-Mode", "hang")
	case "before-receiver":
		cfg.Deliver = func(context.Context, idemoutbox.Message) error { return ready() }
		runChild(t, cfg, context.Background())
	case "after-receiver":
		cfg.Deliver = func(ctx context.Context, m idemoutbox.Message) error {
			if err := deliver(ctx, m); err != nil {
				return err
			}
			return ready()
		}
		runChild(t, cfg, context.Background())
	case "drain":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		// The first delivery reaches the receiver, says so, and takes
		// long enough to be under way when the drain is killed.
		cfg.Batch, cfg.Drain = 10, time.Minute
		cfg.Deliver = func(ctx context.Context, m idemoutbox.Message) error {
			if err := deliver(ctx, m); err != nil {
				return err
			}
			fmt.Println("ready")
			time.Sleep(time.Minute)
			return nil
		}
		runChild(t, cfg, ctx)
		return
	case "slow":
		// One delivery at a time, each taking a while after the
		// receiver got it, so that a kill often lands between the two.
		cfg.Deliver = func(ctx context.Context, m idemoutbox.Message) error {
			err := deliver(ctx, m)
			time.Sleep(time.Duration(mrand.IntN(20)) * time.Millisecond)
			return err
		}
		runChild(t, cfg, context.Background())
	case "race":
		cfg.Lease, cfg.Batch, cfg.Workers = 10*time.Second, 3, 2
		cfg.Deliver = deliver
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for !pendingNone(t, inst.Outbox)() {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
		}()
		runChild(t, cfg, ctx)
		return
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	t.Fatal("the child was not killed")
}

// ready says the child is at the point to kill it, and waits for the kill.
func ready() error {
	fmt.Println("ready")
	time.Sleep(2 * time.Minute)
	return errors.New("not killed")
}

// runChild runs one runner of cfg until ctx ends.
func runChild(t *testing.T, cfg idemoutbox.Config, ctx context.Context) {
	r, err := idemoutbox.NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Run(ctx)
}
