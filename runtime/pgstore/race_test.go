package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest/proc"
)

// 64 goroutines claim the same 200 requests in shuffled orders: each key
// has exactly one winner, which completes it, and every other claimant
// meets it in flight or completed, never anything else.
func TestConcurrentClaimsOneWinnerPerKey(t *testing.T) {
	const goroutines, keys = 64, 200
	s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	ctx := context.Background()

	var (
		mu      sync.Mutex
		winners = make(map[string]int, keys)
		wg      sync.WaitGroup
	)
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := rand.Perm(keys)
			for _, k := range order {
				key := "key-" + strconv.Itoa(k)
				c := claimFor(key, fmt.Sprintf("tok-%d-%d", g, k), time.Minute)
				res, err := s.Claim(ctx, c)
				if err != nil {
					errs <- fmt.Errorf("claim %s: %w", key, err)
					return
				}
				if res.Won {
					mu.Lock()
					winners[key]++
					mu.Unlock()
					if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: 201, Body: []byte(key)}); err != nil {
						errs <- fmt.Errorf("complete %s: %w", key, err)
						return
					}
					continue
				}
				switch st := res.Existing.State; st {
				case idemstore.StateInFlight:
				case idemstore.StateCompleted:
					if got := string(res.Existing.Response.Body); got != key {
						errs <- fmt.Errorf("replay of %s has body %q", key, got)
						return
					}
				default:
					errs <- fmt.Errorf("claim %s lost to a %q row", key, st)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		if winners[key] != 1 {
			t.Errorf("%s: %d winners, want 1", key, winners[key])
		}
	}
}

// The helper process: when helperEnv names a mode, this test is the body of
// a child process that the tests below start; otherwise it does nothing.
const (
	helperEnv       = "IDEMGEN_PGSTORE_HELPER"
	helperSchemaEnv = "IDEMGEN_PGSTORE_HELPER_SCHEMA"
	helperKeysEnv   = "IDEMGEN_PGSTORE_HELPER_KEYS"
)

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("runs only as a child process of the multi-process tests")
	}
	pool := openPool(t, os.Getenv(helperSchemaEnv))
	s := pgstore.New(pool)
	switch mode {
	case "race":
		helperRace(t, s)
	case "hang":
		helperHang(t, s)
	case "durable":
		helperDurable(t, s)
	case "rawcommit":
		helperRawCommit(t, s)
	case "phase-" + proc.HangAfterCall, "phase-" + proc.HangAfterRecord:
		helperPhase(t, s, strings.TrimPrefix(mode, "phase-"))
	default:
		t.Fatalf("unknown helper mode %q", mode)
	}
}

// helperRace claims every key from 16 goroutines and prints each key it won.
func helperRace(t *testing.T, s *pgstore.Store) {
	n, err := strconv.Atoi(os.Getenv(helperKeysEnv))
	if err != nil {
		t.Fatal(err)
	}
	proc.RaceChild(t, n, func(key, token string) (idemstore.Result, error) {
		return s.Claim(context.Background(), claimFor(key, token, time.Minute))
	})
}

// helperHang claims a key in transactional mode, writes a business row,
// says so, and waits to be killed.
func helperHang(t *testing.T, s *pgstore.Store) {
	ctx := context.Background()
	res, tx, err := s.ClaimTx(ctx, claimFor("k-crash", "tok-child", time.Minute))
	if err != nil || !res.Won {
		t.Fatalf("child ClaimTx = %+v, %v", res, err)
	}
	if err := writeEffect(ctx, tx.Driver(), "k-crash"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	time.Sleep(2 * time.Minute)
	t.Fatal("child was not killed")
}

func helperCommand(t *testing.T, mode, schema string, extraEnv ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperSchemaEnv+"="+schema)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stderr = os.Stderr
	return cmd
}

// startReadyChild starts a helper process in mode on a schema of its own
// and returns once it printed "ready", with a store on the same schema.
func startReadyChild(t *testing.T, mode string) (*pgxpool.Pool, *pgstore.Store, *exec.Cmd) {
	t.Helper()
	schema := newSchema(t)
	pool := openPool(t, schema)
	cmd := helperCommand(t, mode, schema)
	proc.StartUntilReady(t, cmd)
	return pool, pgstore.New(pool), cmd
}

// killChild kills cmd's process with SIGKILL and waits for it to be gone.
func killChild(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// Two OS processes race for the same keys through their own pools: across
// both, every key has exactly one winner.
func TestTwoProcessesOneWinnerPerKey(t *testing.T) {
	const keys = 300
	schema := newSchema(t)
	proc.TwoProcesses(t, keys, func() *exec.Cmd {
		return helperCommand(t, "race", schema, helperKeysEnv+"="+strconv.Itoa(keys))
	})
}

// kill -9 inside a transactional handler: the child's claim and business
// write die with its connection, and the retry wins at once instead of
// waiting for the minute-long lease. Exactly one effect is committed.
func TestKillDuringTxHandler(t *testing.T) {
	pool, s, cmd := startReadyChild(t, "hang")
	ctx := context.Background()

	// While the child lives, its claim is in flight and a retry answers at once.
	start := time.Now()
	res, tx, err := s.ClaimTx(ctx, claimFor("k-crash", "tok-early", time.Minute))
	if err != nil || res.Won || tx != nil || res.Existing.State != idemstore.StateInFlight {
		t.Fatalf("ClaimTx while the child holds the key = %+v, %v; want lost in flight", res, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("losing ClaimTx took %v", d)
	}

	killChild(t, cmd)
	killed := time.Now()

	var won bool
	for time.Since(killed) < 10*time.Second {
		res, tx, err = s.ClaimTx(ctx, claimFor("k-crash", "tok-parent", time.Minute))
		if err != nil {
			t.Fatalf("ClaimTx after the kill: %v", err)
		}
		if res.Won {
			won = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !won {
		t.Fatalf("retry did not win within 10s of the kill (lease is 1m)")
	}
	t.Logf("retry won %v after the kill (lease 1m)", time.Since(killed).Round(time.Millisecond))
	if res.TookOver {
		t.Errorf("retry took over; want a fresh claim (the child's row died with its transaction)")
	}
	if err := writeEffect(ctx, tx.Driver(), "k-crash"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if n, err := countEffects(ctx, pool, "k-crash"); err != nil || n != 1 {
		t.Fatalf("committed effects = %d, %v; want exactly 1", n, err)
	}
	res, err = s.Claim(ctx, claimFor("k-crash", "tok-replay", time.Minute))
	if err != nil || res.Won || res.Existing.State != idemstore.StateCompleted {
		t.Fatalf("replay after commit = %+v, %v", res, err)
	}
}
