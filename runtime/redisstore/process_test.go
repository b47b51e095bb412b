package redisstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
	"github.com/idemgen/idemgen/runtime/storetest/proc"
)

// The helper process: when helperEnv names a mode, TestHelperProcess is the
// body of a child process that the tests below start; otherwise it does
// nothing.
const (
	helperEnv        = "IDEMGEN_REDISSTORE_HELPER"
	helperBackendEnv = "IDEMGEN_REDISSTORE_HELPER_BACKEND"
	helperPrefixEnv  = "IDEMGEN_REDISSTORE_HELPER_PREFIX"
	helperArgEnv     = "IDEMGEN_REDISSTORE_HELPER_ARG"
)

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("runs only as a child process of the multi-process tests")
	}
	var b backend
	for _, c := range backends() {
		if c.name == os.Getenv(helperBackendEnv) {
			b = c
		}
	}
	if b.open == nil {
		t.Fatalf("unknown backend %q", os.Getenv(helperBackendEnv))
	}
	// The parent owns the prefix and deletes its keys; the child only uses
	// them.
	s, err := redisstore.New(b.open(t), redisstore.WithPrefix(os.Getenv(helperPrefixEnv)))
	if err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "race":
		helperRace(t, s)
	case "hang":
		helperHang(t, s)
	default:
		t.Fatalf("unknown helper mode %q", mode)
	}
}

// helperCommand returns the command of a child process in mode on the
// backend and prefix, with arg for the mode.
func helperCommand(b backend, mode, prefix, arg string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperBackendEnv+"="+b.name,
		helperPrefixEnv+"="+prefix, helperArgEnv+"="+arg)
	if b.name == "cluster" {
		// The child joins the parent's cluster instead of starting one.
		cmd.Env = append(cmd.Env, cluster.ChildEnv())
	}
	cmd.Stderr = os.Stderr
	return cmd
}

func claimFor(key, token string) idemstore.Claim {
	sum := sha256.Sum256([]byte(`{"amount":100}`))
	return idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "acme", Scope: "createTransfer", Key: key},
		Operation:     "createTransfer",
		Fingerprint:   sum[:],
		Token:         token,
		Lease:         time.Minute,
		TTL:           time.Hour,
		OnLeaseExpiry: idemstore.FailClosed,
	}
}

// helperRace claims every key from 16 goroutines and prints each key it won.
func helperRace(t *testing.T, s *redisstore.Store) {
	n, err := strconv.Atoi(os.Getenv(helperArgEnv))
	if err != nil {
		t.Fatal(err)
	}
	proc.RaceChild(t, n, func(key, token string) (idemstore.Result, error) {
		return s.Claim(context.Background(), claimFor(key, token))
	})
}

// crashLease is the lease of the kill -9 test's policy: short, so that the
// test sees it run out, and long enough for the child to start and claim
// well within it.
const crashLease = 2 * time.Second

// crashPolicy is the policy both processes of the kill -9 test serve.
func crashPolicy(mode idemstore.LeaseExpiry) idem.Policy {
	return enginetest.EnginePolicy("createTransfer", "/transfers", crashLease, mode, false)
}

// helperHang serves the engine, sends itself one request whose handler
// says "ready" and never returns, and waits to be killed.
func helperHang(t *testing.T, s *redisstore.Store) {
	mode := idemstore.LeaseExpiry(os.Getenv(helperArgEnv))
	handler := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		fmt.Println("ready")
		select {}
	})
	es := enginetest.ServeEngine(t, s, handler, crashPolicy(mode))
	go func() { _, _ = es.Post("/transfers", "k-crash", crashBody) }()
	time.Sleep(2 * time.Minute)
	t.Fatal("child was not killed")
}

const crashBody = `{"amount":100,"to":"acc_1"}`

// Two OS processes race for the same keys through their own clients:
// across both, every key has exactly one winner.
func TestTwoProcessesOneWinnerPerKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const keys = 300
		c := b.open(t)
		prefix := newPrefix(t, c)
		proc.TwoProcesses(t, keys, func() *exec.Cmd {
			return helperCommand(b, "race", prefix, strconv.Itoa(keys))
		})
	})
}

// Proof: kill -9 while a handler runs. Redis cannot know that the process
// died, so the key stays in flight for the rest of its lease (409
// request-in-progress, nothing runs); then the policy decides: takeover
// runs the handler once more, in this process, and fail-closed answers
// outcome-unknown for good.
func TestKillDuringHandler(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, mode := range []idemstore.LeaseExpiry{idemstore.Takeover, idemstore.FailClosed} {
			t.Run(string(mode), func(t *testing.T) {
				c := b.open(t)
				prefix := newPrefix(t, c)
				cmd := helperCommand(b, "hang", prefix, string(mode))
				claimed, readyAt := proc.StartUntilReady(t, cmd)
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = cmd.Wait()

				s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					enginetest.Created(w, r.Header.Get("Idempotency-Key"))
				})
				es := enginetest.ServeEngine(t, s, handler, crashPolicy(mode))

				// Within the dead process's lease: in flight.
				a := es.MustPost(t, "/transfers", "k-crash", crashBody)
				if time.Since(claimed) >= crashLease {
					t.Fatalf("the child took %v to claim; the lease (%v) is over before the test could meet it", time.Since(claimed), crashLease)
				}
				if err := enginetest.CheckProblem(a, http.StatusConflict, problem.InProgress, true); err != nil {
					t.Errorf("retry within the lease: %v", err)
				}
				time.Sleep(time.Until(readyAt.Add(crashLease + 100*time.Millisecond)))

				a = es.MustPost(t, "/transfers", "k-crash", crashBody)
				switch mode {
				case idemstore.Takeover:
					if a.Status != http.StatusCreated || a.Replayed() {
						t.Fatalf("retry after the lease: %v, want a fresh 201", a)
					}
					if err := enginetest.CheckReplay(es.MustPost(t, "/transfers", "k-crash", crashBody), a); err != nil {
						t.Errorf("retry after the takeover: %v", err)
					}
					if n := es.RunsOf("k-crash"); n != 1 {
						t.Errorf("handler ran %d times here, want 1", n)
					}
				case idemstore.FailClosed:
					for i := range 2 {
						if err := enginetest.CheckProblem(a, http.StatusConflict, problem.OutcomeUnknown, false); err != nil {
							t.Errorf("retry %d after the lease: %v", i, err)
						}
						a = es.MustPost(t, "/transfers", "k-crash", crashBody)
					}
					if n := es.RunsOf("k-crash"); n != 0 {
						t.Errorf("handler ran %d times here, want 0", n)
					}
				}
			})
		}
	})
}
