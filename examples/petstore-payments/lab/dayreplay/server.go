package dayreplay

import (
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

// serverPackage, the lab's server (the service with --chaos-delay), is
// built when --crash is given no binary.
const serverPackage = "github.com/idemgen/idemgen/examples/petstore-payments/lab/cmd/petstore-lab"

// managedServer is a server process that dayreplay starts, kills and
// restarts on one address and one database.
type managedServer struct {
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

func startManaged(ctx context.Context, c Config) (*managedServer, error) {
	dir, err := tempDir()
	if err != nil {
		return nil, err
	}
	bin := c.ServerBin
	if bin == "" {
		bin = filepath.Join(dir, "petstore-lab")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, serverPackage)
		build.Stdout, build.Stderr = c.Log, c.Log
		if err := build.Run(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("build the server: %w", err)
		}
	}
	// A port fixed for the whole day, so that clients reach the restarted
	// server at the same address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	dbURL := c.DatabaseURL
	if dbURL == "" {
		dbURL = "sqlite:" + filepath.Join(dir, "day.db")
	}
	args := []string{"--addr", addr, "--database-url", dbURL, "--api-keys", c.APIKeys}
	args = append(args, c.ServerArgs...)
	s := &managedServer{bin: bin, args: args, url: "http://" + addr, dir: dir, stderr: c.Log}
	if err := s.start(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// start runs the server and waits until /healthz answers.
func (s *managedServer) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, s.args...)
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start the server: %w", err)
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
	return fmt.Errorf("the server did not become healthy; see %s", filepath.Join(s.dir, "server.log"))
}

// chaos kills the server with SIGKILL at random moments and restarts it,
// until ctx ends or, when limit is positive, after limit kills.
func (s *managedServer) chaos(ctx context.Context, seed uint64, every time.Duration, limit int) {
	rng := rand.New(rand.NewPCG(seed, 42))
	for n := 0; limit <= 0 || n < limit; n++ {
		wait := time.Duration(float64(every) * (0.5 + rng.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		s.mu.Lock()
		_ = s.cmd.Process.Kill()
		s.nKills++
		exited := s.exited
		s.mu.Unlock()
		// The old process must be gone before the new one binds the port.
		<-exited
		if err := s.start(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintln(s.stderr, "dayreplay: restart:", err)
		}
	}
}

// ensureUp restarts the server if the last kill left it down.
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
