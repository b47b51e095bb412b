// Package proc is the part of a store's tests that needs more than one
// process, for the author of a store: two children racing to claim the same
// keys (TwoProcesses, with RaceChild as the child's half), and a child that
// is started and awaited until it holds a claim (StartUntilReady), to be
// killed in the middle of a request.
package proc

import (
	"bufio"
	"fmt"
	mrand "math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// TwoProcesses starts two child processes made by command, which race to
// claim keys "key-0" … "key-<keys-1>" and print "WON <key>" for each claim
// they win, and checks that every key has exactly one winner across both.
func TwoProcesses(t *testing.T, keys int, command func() *exec.Cmd) {
	t.Helper()
	outs := make([]strings.Builder, 2)
	cmds := make([]*exec.Cmd, 2)
	for i := range cmds {
		cmds[i] = command()
		cmds[i].Stdout = &outs[i]
	}
	for i, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child %d: %v", i, err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i].String())
		}
	}
	winners := make(map[string][]int)
	for i := range outs {
		for line := range strings.Lines(outs[i].String()) {
			if key, ok := strings.CutPrefix(strings.TrimSpace(line), "WON "); ok {
				winners[key] = append(winners[key], i)
			}
		}
	}
	perProcess := [2]int{}
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		if len(winners[key]) != 1 {
			t.Errorf("%s won by processes %v, want exactly one", key, winners[key])
			continue
		}
		perProcess[winners[key][0]]++
	}
	if len(winners) != keys {
		t.Errorf("%d keys won, want %d", len(winners), keys)
	}
	t.Logf("keys won per process: %v", perProcess)
}

// StartUntilReady starts cmd, a child process of a proof, and waits until it
// prints "ready", as a child does from inside its handler after its claim. It returns
// the time just before the start, which is before the claim, and the time
// it read "ready", which is after.
func StartUntilReady(t *testing.T, cmd *exec.Cmd) (began, readyAt time.Time) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				ready <- true
				break
			}
		}
		for sc.Scan() { // drain
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("child exited before it was ready")
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("child never got ready")
	}
	return began, time.Now()
}

// RaceChild is the child's half of TwoProcesses: it claims keys "key-0" …
// "key-<keys-1>" from 16 goroutines, each in its own random order, with
// claim(key, token), and prints "WON <key>" for each claim it won.
func RaceChild(t *testing.T, keys int, claim func(key, token string) (idemstore.Result, error)) {
	t.Helper()
	var (
		mu  sync.Mutex
		won []string
		wg  sync.WaitGroup
	)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range mrand.Perm(keys) {
				key := "key-" + strconv.Itoa(k)
				res, err := claim(key, fmt.Sprintf("tok-%d-%d-%d", os.Getpid(), g, k))
				if err != nil {
					t.Errorf("claim %s: %v", key, err)
					return
				}
				if res.Won {
					mu.Lock()
					won = append(won, key)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, k := range won {
		fmt.Printf("WON %s\n", k)
	}
}
