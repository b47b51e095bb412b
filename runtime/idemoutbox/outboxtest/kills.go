package outboxtest

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
	"github.com/idemgen/idemgen/runtime/storetest/proc"
)

// The environment of a child process: what it does, and the file its
// receiver appends each delivery to.
const (
	modeEnv     = "OUTBOXTEST_MODE"
	receiverEnv = "OUTBOXTEST_RECEIVER"
)

// childLease is the lease of a child's runner: a killed child's effect is
// due again this long after it was claimed.
const childLease = time.Second

// RunKills runs the scenarios in which real child processes, the test
// binary run again (Target.HelperEnv), are killed with SIGKILL at each point of an effect's life.
// After each kill a runner in the test's process plays the restarted
// service: every committed request's effect is delivered, none of a
// request that did not commit, and the duplicates are counted; only a
// kill between a delivery and its record may make one.
func RunKills(t *testing.T, tg Target) {
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *killed)
	}{
		{"AfterCommitBeforeDelivery", killAfterCommit},
		{"DuringDeliveryBeforeReceiver", killBeforeReceiver},
		{"AfterReceiverBeforeRecord", killAfterReceiver},
		{"DuringShutdown", killDuringShutdown},
		{"TwoProcesses", twoProcesses},
		{"RandomKills", randomKills},
	} {
		t.Run(sc.name, func(t *testing.T) {
			db := tg.NewDB(t)
			k := &killed{tg: tg, db: db, file: filepath.Join(t.TempDir(), "received")}
			sc.run(t, k)
		})
	}
}

// killed is one kill scenario's database and receiver file.
type killed struct {
	tg   Target
	db   string
	file string
}

// child returns a child in mode on k's database: the test binary, run
// again with its TestHelperProcess alone.
func (k *killed) child(t *testing.T, mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), k.tg.HelperEnv+"="+k.db, modeEnv+"="+mode, receiverEnv+"="+k.file)
	cmd.Stderr = os.Stderr
	return cmd
}

// startKilled starts a child in mode, waits until it says it is at the
// point to kill, and kills it with SIGKILL.
func (k *killed) startKilled(t *testing.T, mode string) {
	t.Helper()
	cmd := k.child(t, mode)
	proc.StartUntilReady(t, cmd)
	kill(t, cmd, syscall.SIGKILL)
}

// kill signals cmd's process and waits for it to end, failing the test
// unless the signal ended it: a child that ended first was not killed
// where the scenario says.
func kill(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
		t.Fatalf("the child ended with %v before its %v", cmd.ProcessState, sig)
	}
}

// stage commits n requests in the test's process, each staging one
// receipt whose payload is its key "c-<i>".
func (k *killed) stage(t *testing.T, n int) {
	t.Helper()
	f := &fixture{inst: k.tg.Open(t, k.db, maxPayload)}
	f.h = newHandler(f.inst)
	f.es = enginetest.ServeEngine(t, f.inst.Store, f.h, policies(time.Minute)...)
	for i := range n {
		f.post(t, txPath, "c-"+strconv.Itoa(i), "", http.StatusCreated)
	}
	f.es.Close()
}

// restart delivers what is left, as the restarted service would, and
// checks the outcome: want requests "c-0" … committed, each with its
// effect delivered, no effect of any other request, and dups duplicate
// deliveries at most. It returns the duplicates.
func (k *killed) restart(t *testing.T, want, dups int) int {
	t.Helper()
	inst := k.tg.Open(t, k.db, maxPayload)
	cfg := runnerConfig(inst.Outbox, fileReceiver(k.file))
	runUntil(t, cfg, 1, pendingNone(t, inst.Outbox))
	ms, err := inst.Outbox.List(context.Background(), idemoutbox.Query{})
	if err != nil {
		t.Fatal(err)
	}
	byKey := make(map[string]string) // effect key → the payload, its request's key
	for _, m := range ms {
		if m.State != idemoutbox.StateDelivered {
			t.Errorf("effect of %s is %s after the restart, want delivered", m.Payload, m.State)
		}
		if n, err := inst.Count(context.Background(), string(m.Payload)); err != nil || n != 1 {
			t.Errorf("an effect of %s is staged, whose request has %d business writes (%v): it did not commit", m.Payload, n, err)
		}
		byKey[m.EffectKey] = string(m.Payload)
	}
	got := received(t, k.file)
	for i := range want {
		c := "c-" + strconv.Itoa(i)
		if n, err := inst.Count(context.Background(), c); err != nil || n != 1 {
			t.Errorf("%s: %d business writes (%v), want it committed", c, n, err)
		}
	}
	if len(ms) != want {
		t.Errorf("%d effects staged, want %d, one per committed request", len(ms), want)
	}
	total := 0
	for ek, n := range got {
		total += n - 1
		if _, ok := byKey[ek]; !ok {
			t.Errorf("the receiver got effect key %s, of no committed request", ek)
		}
	}
	for ek, c := range byKey {
		if got[ek] == 0 {
			t.Errorf("%s's effect was never delivered", c)
		}
	}
	t.Logf("%d effects delivered, %d duplicate deliveries", len(got), total)
	if total > dups {
		t.Errorf("%d duplicate deliveries, want at most %d", total, dups)
	}
	return total
}

// fileReceiver appends each delivery's effect key, with the process's id,
// to file, in one write: the receiver has it once the write returns.
func fileReceiver(file string) idemoutbox.Deliver {
	return func(_ context.Context, m idemoutbox.Message) error {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "%d %s\n", os.Getpid(), m.EffectKey)
		return errors.Join(err, f.Close())
	}
}

// received counts the deliveries in file by effect key.
func received(t *testing.T, file string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	got := make(map[string]int)
	for line := range strings.Lines(string(b)) {
		if _, ek, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			got[ek]++
		}
	}
	return got
}

// kill -9 of a service after its requests committed their effects and
// before any was delivered, while one more request has staged its effect
// and not committed: the committed ones are each delivered once after
// the restart, the uncommitted one never.
func killAfterCommit(t *testing.T, k *killed) {
	k.startKilled(t, "serve")
	if n := k.restart(t, serveRequests, 0); n != 0 {
		t.Errorf("%d duplicates with no delivery before the kill", n)
	}
}

// kill -9 of a runner during a delivery, before the receiver got it: the
// effect is delivered after its lease, once.
func killBeforeReceiver(t *testing.T, k *killed) {
	k.stage(t, 5)
	k.startKilled(t, "before-receiver")
	k.restart(t, 5, 0)
}

// kill -9 of a runner after its receiver got an effect and before the
// delivery was recorded: the effect is delivered again after its lease,
// the one duplicate the outbox allows.
func killAfterReceiver(t *testing.T, k *killed) {
	k.stage(t, 5)
	k.startKilled(t, "after-receiver")
	if n := k.restart(t, 5, 1); n != 1 {
		t.Errorf("%d duplicates, want exactly the 1 delivered before the kill and not recorded", n)
	}
}

// kill -9 of a runner while it drains after SIGTERM, its receiver having
// got the delivery under way, which is not recorded yet: every effect is
// delivered after the restart, and that one twice, the only duplicate.
// The effects the runner had claimed and not begun it gave back when the
// drain began, so they are delivered at once, not after their lease.
func killDuringShutdown(t *testing.T, k *killed) {
	k.stage(t, 10)
	cmd := k.child(t, "drain")
	proc.StartUntilReady(t, cmd)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The drain lasts as long as the delivery under way, a minute: the
	// kill lands in it once the child has given back the rest.
	inst := k.tg.Open(t, k.db, maxPayload)
	leased := -1
	for deadline := time.Now().Add(20 * time.Second); leased != 1 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		ms, err := inst.Outbox.List(context.Background(), idemoutbox.Query{})
		if err != nil {
			t.Fatal(err)
		}
		leased = 0
		for _, m := range ms {
			if !m.LeasedUntil.IsZero() {
				leased++
			}
		}
	}
	if leased != 1 {
		t.Errorf("%d effects still leased in the drain, want the 1 under way", leased)
	}
	kill(t, cmd, syscall.SIGKILL)
	if n := k.restart(t, 10, 1); n != 1 {
		t.Errorf("%d duplicates, want exactly the 1 the receiver got before the kill", n)
	}
}

// Two runner processes deliver one outbox at once: every effect is
// delivered, none twice under a lease that no delivery outlives.
func twoProcesses(t *testing.T, k *killed) {
	const n = 60
	k.stage(t, n)
	cmds := []*exec.Cmd{k.child(t, "race"), k.child(t, "race")}
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("runner process: %v", err)
		}
	}
	b, _ := os.ReadFile(k.file)
	perProcess := make(map[string]int)
	for line := range strings.Lines(string(b)) {
		pid, _, _ := strings.Cut(line, " ")
		perProcess[pid]++
	}
	t.Logf("deliveries per process: %v", perProcess)
	k.restart(t, n, 0)
}

// Runner processes killed with SIGKILL again and again at random moments
// of their work, two at a time: after the restart every effect is
// delivered, and each duplicate is one a kill cut off between a delivery
// and its record, so there are at most as many as deliveries were under
// way at the kills (one per process, each delivering one at a time).
func randomKills(t *testing.T, k *killed) {
	const effects, rounds = 40, 6
	k.stage(t, effects)
	kills := 0
	for range rounds {
		cmds := []*exec.Cmd{k.child(t, "slow"), k.child(t, "slow")}
		for _, c := range cmds {
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(50+mrand.IntN(250)) * time.Millisecond)
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGKILL)
			_ = c.Wait()
			kills++
		}
	}
	got := received(t, k.file)
	t.Logf("%d kills; %d effects reached the receiver before the restart", kills, len(got))
	k.restart(t, effects, kills)
}
