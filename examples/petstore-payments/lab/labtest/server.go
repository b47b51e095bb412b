package labtest

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one running server process. Launch starts it, and the test's
// cleanup stops it.
type Server struct {
	t   testing.TB
	cmd *exec.Cmd
	// URL is the server's base URL, http://127.0.0.1:port.
	URL  string
	mu   sync.Mutex
	logs bytes.Buffer
	done chan error
}

var listening = regexp.MustCompile(`listening on (\S+?)"? `)

// Launch runs the binary bin with env added to the test's environment and
// args after --addr, and waits for it to log the bound address.
func Launch(t testing.TB, bin string, env []string, args ...string) *Server {
	t.Helper()
	args = append([]string{"--addr", "127.0.0.1:0"}, args...)
	s := &Server{t: t, cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Dir = t.TempDir()
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		s.done <- s.cmd.Wait()
	}()
	t.Cleanup(func() { s.Stop() })
	select {
	case a := <-addr:
		s.URL = "http://" + a
	case err := <-s.done:
		s.done <- err
		t.Fatalf("server exited before listening: %v\n%s", err, s.Logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not log its address\n%s", s.Logs())
	}
	return s
}

// Logs returns what the server logged so far.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// Stop sends SIGTERM and expects a clean exit; a killed server is left be.
func (s *Server) Stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil && !strings.Contains(err.Error(), "killed") {
			s.t.Errorf("server exit after SIGTERM: %v\n%s", err, s.Logs())
		}
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		s.t.Errorf("server did not stop within 15s of SIGTERM\n%s", s.Logs())
	}
}

// Kill9 kills the server with SIGKILL and waits for it to be gone.
func (s *Server) Kill9() {
	_ = s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err
}

// Metric reads one sample of the server's /metrics: the value after
// name, or "" if the server has no such sample.
func (s *Server) Metric(t testing.TB, name string) string {
	t.Helper()
	res, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}

// Pid is the server process's ID.
func (s *Server) Pid() int { return s.cmd.Process.Pid }
