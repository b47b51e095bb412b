package main_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
	"github.com/idemgen/idemgen/internal/logscan"
)

// documentedLine is one row of the README's "What it logs": a level, the
// message as a pattern, and whether TestOperatorSeesTheDocumentedLogLines
// provokes it.
type documentedLine struct {
	level, msg string
	pattern    *regexp.Regexp
	tested     bool
}

// readmeRow is a row of that table: | LEVEL | `message` | … | tested |.
var readmeRow = regexp.MustCompile("^\\| (INFO|WARN|ERROR) \\| `([^`]+)` \\|.*\\| (tested)? ?\\|$")

// documentedLines reads the README's table of log lines. In a message,
// ADDR stands for an address and … for any text.
func documentedLines(t *testing.T) []documentedLine {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### What it logs\n")
	if !ok {
		t.Fatal(`README.md has no section "What it logs"`)
	}
	section, _, _ = strings.Cut(section, "\n#")
	var out []documentedLine
	for _, line := range strings.Split(section, "\n") {
		m := readmeRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		p := regexp.QuoteMeta(m[2])
		p = strings.NewReplacer("ADDR", `\S+`, "…", ".*").Replace(p)
		out = append(out, documentedLine{level: m[1], msg: m[2], pattern: regexp.MustCompile("^" + p + "$"), tested: m[3] != ""})
	}
	if len(out) == 0 {
		t.Fatal(`README.md's "What it logs" lists no line`)
	}
	return out
}

// TestEveryWarningOfTheServiceIsListed reads the WARN and ERROR lines the
// service's own packages, and the outbox runner it runs for receipts, can
// log from their source: each must be in the README's "What it logs", so
// that a new one without its entry fails here.
func TestEveryWarningOfTheServiceIsListed(t *testing.T) {
	documented := documentedLines(t)
	dirs, err := filepath.Glob(filepath.Join("internal", "*"))
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, filepath.Join("..", "..", "runtime", "idemoutbox"))
	found := 0
	for _, dir := range dirs {
		lines, err := logscan.WarnAndError(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			found++
			if !listed(documented, labtest.LogLine{Level: l.Level, Msg: l.Msg}) {
				t.Errorf("%s logs %s %q, which the README's \"What it logs\" does not list", dir, l.Level, l.Msg)
			}
		}
	}
	if found < 10 {
		t.Fatalf("found %d WARN and ERROR lines in the service's source; the scan is missing them", found)
	}
}

// TestOperatorSeesTheDocumentedLogLines starts the service as an operator
// might, without API keys or a key label secret, on SQLite; kills it with
// SIGKILL while an account opening is in flight; starts it again, which
// ends the dead server's lease; retries the opening, which meets the key
// indeterminate; overloads it so that admission sheds; and stops it with
// SIGTERM. The lab's server is the service with a pause to kill it in
// (--chaos-delay), and logs as it does. Every line the README marks as
// tested must be in the two processes' output, at its level, and every
// warning and error there must be in the README.
func TestOperatorSeesTheDocumentedLogLines(t *testing.T) {
	t.Parallel()
	documented := documentedLines(t)
	db := labtest.SQLiteURL(t)
	// Nothing of the test's environment may give the service keys or a
	// secret.
	env := []string{"API_KEYS=", "KEY_LABEL_SECRET=", "DATABASE_URL="}
	demoKey := "demo-key-acme"

	s1 := labtest.Launch(t, bins.Lab, env, "--database-url", db, "--chaos-delay", "20s")
	key, body, _ := interruptAccountOpening(t, s1, labtest.NewClient(t, s1, demoKey))

	s2 := labtest.Launch(t, bins.Lab, env, "--database-url", db, "--chaos-delay", "300ms", "--max-in-flight", "1", "--max-queue", "0")
	c := labtest.NewClient(t, s2, demoKey)
	c.ExpectProblem(409, "outcome-unknown", "POST", "/accounts", key, body)
	if shed := overload(t, c); shed == 0 {
		t.Error("8 account openings at once, one admitted at a time and none queued: none was refused 503")
	}
	s2.Stop()

	logs := s1.Logs() + s2.Logs()
	lines := labtest.LogLines(logs)
	for _, d := range documented {
		if d.tested && !logged(lines, d) {
			t.Errorf("the README says the service logs %s %q; it did not:\n%s", d.level, d.msg, logs)
		}
	}
	for _, l := range lines {
		if l.Level != "WARN" && l.Level != "ERROR" {
			continue
		}
		if !listed(documented, l) {
			t.Errorf("the service logged %s %q, which the README's \"What it logs\" does not list", l.Level, l.Msg)
		}
	}
	if !strings.Contains(s2.Logs(), "level=WARN msg=\"ended the leases of claims left in flight by a process that is gone; their retries take them over\" claims=1") {
		t.Errorf("the restarted server did not log the one lease it ended:\n%s", s2.Logs())
	}
}

// overload sends 8 account openings at once and returns how many were
// answered 503.
func overload(t *testing.T, c *labtest.Client) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	shed := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "shed-" + labtest.RandomHex(6)
			r, err := c.Do("POST", "/accounts", key, `{"owner":"shed `+string(rune('a'+i))+`","currency":"EUR","initial_balance":1}`)
			if err != nil {
				t.Error(err)
				return
			}
			if r.Status == 503 {
				mu.Lock()
				shed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return shed
}

// is reports whether l is the documented line d.
func (d documentedLine) is(l labtest.LogLine) bool {
	return l.Level == d.level && d.pattern.MatchString(l.Msg)
}

// logged reports whether lines hold d.
func logged(lines []labtest.LogLine, d documentedLine) bool {
	return slices.ContainsFunc(lines, d.is)
}

// listed reports whether l is one of the documented lines.
func listed(documented []documentedLine, l labtest.LogLine) bool {
	return slices.ContainsFunc(documented, func(d documentedLine) bool { return d.is(l) })
}
