// Package stacktest runs a stack page's service in a child process of its
// own test binary, for the tests that end it with SIGKILL (no shutdown, no
// flush) and retry against the service started again. The child is the
// test binary run again with the environment the test gives; its TestMain
// sees that environment and serves instead of running tests, printing
// "listening on ADDR" once it is ready.
package stacktest

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Start runs the test binary as a child with env added to this process's
// environment, waits for the address it prints, and returns its base URL
// with a kill that ends it with SIGKILL (also run when the test ends).
func Start(t testing.TB, env ...string) (base string, kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill = func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	t.Cleanup(kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("the service did not start: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return "http://" + addr, kill
}

// Do sends req and returns its answer with the body read.
func Do(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// WaitForFile returns once the file at path exists, the sign a child gives
// that it reached a point the test waits for; it fails the test after a
// minute.
func WaitForFile(t testing.TB, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within a minute", path)
		}
	}
}
