package labtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// example is the import path of the service; the lab's commands are under
// it.
const example = "github.com/idemgen/idemgen/examples/petstore-payments"

// Binaries are the commands Run builds for a test binary, by path.
type Binaries struct {
	// Server is the service.
	Server string
	// Lab is the lab's server: the service with the switches of the lab's
	// days and benchmarks (--chaos-delay, --idempotency=off or
	// handwritten).
	Lab string
	// Processor is the fake payment processor of the days with effects.
	Processor string
	// Dir holds the three, and is where tests build other commands they
	// need; Run removes it when the tests are done.
	Dir string
}

// Run builds the binaries into a temporary directory, stores their paths
// in bins, runs the tests and returns their exit code; a TestMain passes
// it to os.Exit.
func Run(m *testing.M, bins *Binaries) int {
	dir, err := os.MkdirTemp("", "petstore-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*bins = Binaries{
		Server:    filepath.Join(dir, "petstore-payments"),
		Lab:       filepath.Join(dir, "petstore-lab"),
		Processor: filepath.Join(dir, "processor"),
		Dir:       dir,
	}
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), example, example+"/lab/cmd/petstore-lab", example+"/lab/cmd/processor")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the servers:", err)
		return 1
	}
	return m.Run()
}

// StartServer runs the service on a free loopback port with the database
// and extra flags, and waits for it to log the bound address.
func (b Binaries) StartServer(t testing.TB, databaseURL string, flags ...string) *Server {
	t.Helper()
	return Launch(t, b.Server, nil, append([]string{"--database-url", databaseURL, "--api-keys", APIKeys}, flags...)...)
}

// StartLab is StartServer for the lab's server, which also takes the
// lab's flags.
func (b Binaries) StartLab(t testing.TB, databaseURL string, flags ...string) *Server {
	t.Helper()
	return Launch(t, b.Lab, nil, append([]string{"--database-url", databaseURL, "--api-keys", APIKeys}, flags...)...)
}
