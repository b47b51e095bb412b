package fingerprint

import (
	"os"
	"os/exec"
	"testing"
)

// TestFormReaders runs the differential test of form fingerprints against
// net/http's ParseForm and oapi-codegen's BindForm (testdata/formreaders).
// It is a module of its own, so that the project's go.mod does not depend
// on oapi-codegen; its dependencies come from the module cache or the
// module proxy.
func TestFormReaders(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module that depends on oapi-codegen's runtime")
	}
	cmd := exec.Command("go", "test", "-count=1", ".")
	cmd.Dir = "testdata/formreaders"
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test in %s: %v\n%s", cmd.Dir, err, out)
	}
	t.Logf("%s", out)
}
