package docs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/logscan"
)

// Every WARN and ERROR line the engine logs is one an operator should act
// on, so each is listed in docs/runtime.md ("What the engine logs") with
// what to do about it. The test reads the messages from the engine's
// source, so a new log line without its entry fails here.
func TestEveryEngineWarningIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "runtime.md"))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := logscan.WarnAndError(filepath.Join(root, "runtime", "idem"))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 10 {
		t.Fatalf("found %d WARN and ERROR messages in the engine; the parser is missing them", len(msgs))
	}
	page := strings.Join(strings.Fields(string(doc)), " ")
	for _, m := range msgs {
		if !strings.Contains(page, m.Msg) {
			t.Errorf("docs/runtime.md does not list the engine's log line %q", m.Msg)
		}
	}
}
