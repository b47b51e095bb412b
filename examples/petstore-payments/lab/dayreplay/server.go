package dayreplay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// serverPackage, the lab's server (the service with --chaos-delay), and
// processorPackage, the fake payment processor, are built when --crash is
// given no binaries.
const (
	serverPackage    = "github.com/idemgen/idemgen/examples/petstore-payments/lab/cmd/petstore-lab"
	processorPackage = "github.com/idemgen/idemgen/examples/petstore-payments/lab/cmd/processor"
)

// managedServer is a process that dayreplay starts, kills and restarts on
// one address: the server, on one database, or the processor, on one
// directory of journals.
type managedServer struct {
	name   string // of its log file, name.log
	bin    string
	args   []string
	url    string
	dir    string
	stderr io.Writer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	nKills int
}

// managed are the processes of a day with Crash: the server, and the
// processor when the day has one.
type managed struct {
	server, processor *managedServer
}

// startManaged starts the day's processes: the processor first, when c
// asks for one, and then the server, pointed at it.
func startManaged(ctx context.Context, c Config) (*managed, error) {
	var m managed
	serverArgs := []string{"--database-url", c.DatabaseURL, "--api-keys", c.APIKeys}
	if c.Processor {
		p, err := startProcess(ctx, "processor", c.ProcessorBin, processorPackage, c.Log, func(dir string) []string {
			return append([]string{"--dir", dir}, c.ProcessorArgs...)
		})
		if err != nil {
			return nil, err
		}
		m.processor = p
		serverArgs = append(serverArgs, "--processor-url", p.url, "--receipts-url", p.url+"/v1/receipts")
	}
	s, err := startProcess(ctx, "server", c.ServerBin, serverPackage, c.Log, func(dir string) []string {
		if c.DatabaseURL == "" {
			serverArgs[1] = "sqlite:" + filepath.Join(dir, "day.db")
		}
		return append(serverArgs, c.ServerArgs...)
	})
	if err != nil {
		m.close()
		return nil, err
	}
	m.server = s
	return &m, nil
}

// close stops the day's processes, the server first.
func (m *managed) close() {
	if m.server != nil {
		m.server.close()
	}
	if m.processor != nil {
		m.processor.close()
	}
}

// startProcess starts bin, or the binary of pkg it builds when bin is
// empty, in a directory of its own, on a free loopback port, with the
// arguments args returns for the directory.
func startProcess(ctx context.Context, name, bin, pkg string, log io.Writer, args func(dir string) []string) (*managedServer, error) {
	dir, err := tempDir()
	if err != nil {
		return nil, err
	}
	if bin == "" {
		bin = filepath.Join(dir, name)
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		build.Stdout, build.Stderr = log, log
		if err := build.Run(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("build the %s: %w", name, err)
		}
	}
	// A port fixed for the whole day, so that clients reach the restarted
	// process at the same address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	s := &managedServer{name: name, bin: bin, args: append([]string{"--addr", addr}, args(dir)...), url: "http://" + addr, dir: dir, stderr: log}
	if err := s.start(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// start runs the process and waits until /healthz answers.
func (s *managedServer) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, s.args...)
	logf, err := os.OpenFile(filepath.Join(s.dir, s.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start the %s: %w", s.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		res, err := http.Get(s.url + "/healthz")
		if err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the %s did not become healthy; see %s", s.name, filepath.Join(s.dir, s.name+".log"))
}

// targets are the sets of processes the kills take turns on: the server
// alone; with a processor, then the processor alone, then both at once.
func (m *managed) targets() [][]*managedServer {
	if m.processor == nil {
		return [][]*managedServer{{m.server}}
	}
	return [][]*managedServer{{m.server}, {m.processor}, {m.server, m.processor}}
}

// KillTargets returns how many of kills kill the server and how many the
// processor, in a day with a processor: the kills take turns on the
// server alone, the processor alone, and both at once.
func KillTargets(kills int) (server, processor int) {
	for n := range kills {
		if n%3 != 1 {
			server++
		}
		if n%3 != 0 {
			processor++
		}
	}
	return server, processor
}

// chaos kills the day's processes with SIGKILL at random moments and
// restarts them, until ctx ends or, when limit is positive, after limit
// kills. Each kill takes the next set of targets.
func (m *managed) chaos(ctx context.Context, seed uint64, every time.Duration, limit int) {
	rng := rand.New(rand.NewPCG(seed, 42))
	targets := m.targets()
	for n := 0; limit <= 0 || n < limit; n++ {
		wait := time.Duration(float64(every) * (0.5 + rng.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		set := targets[n%len(targets)]
		for _, s := range set {
			s.kill()
		}
		// The processor comes back first, as the server's requests need it.
		for i := len(set) - 1; i >= 0; i-- {
			if err := set[i].start(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintf(set[i].stderr, "dayreplay: restart the %s: %v\n", set[i].name, err)
			}
		}
	}
}

// kill kills the process with SIGKILL and waits until it is gone, so that
// its successor can bind the port.
func (s *managedServer) kill() {
	s.mu.Lock()
	_ = s.cmd.Process.Kill()
	s.nKills++
	exited := s.exited
	s.mu.Unlock()
	<-exited
}

// ensureUp restarts the day's processes that the last kill left down,
// the processor first.
func (m *managed) ensureUp(ctx context.Context) error {
	if m.processor != nil {
		if err := m.processor.ensureUp(ctx); err != nil {
			return err
		}
	}
	return m.server.ensureUp(ctx)
}

// ensureUp restarts the process if the last kill left it down.
func (s *managedServer) ensureUp(ctx context.Context) error {
	res, err := http.Get(s.url + "/healthz")
	if err == nil {
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK {
			return nil
		}
	}
	return s.start(ctx)
}

// logLines counts the lines of the process's log, across its restarts,
// that hold text.
func (s *managedServer) logLines(text string) (int, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, s.name+".log"))
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte(text)), nil
}

func (s *managedServer) kills() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nKills
}

// close stops the server and removes its files.
func (s *managedServer) close() {
	s.mu.Lock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.exited:
		case <-time.After(12 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	s.mu.Unlock()
	_ = os.RemoveAll(s.dir)
}
