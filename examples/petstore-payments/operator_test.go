package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// idemgen is the project's command, built on first use: the operator's
// side of the tests below runs `idemgen keys` as an operator would.
var idemgen struct {
	once sync.Once
	path string
	err  error
}

func idemgenBinary(t *testing.T) string {
	t.Helper()
	idemgen.once.Do(func() {
		idemgen.path = filepath.Join(bins.Dir, "idemgen")
		out, err := exec.Command("go", "build", "-o", idemgen.path, "github.com/idemgen/idemgen/cmd/idemgen").CombinedOutput()
		if err != nil {
			idemgen.err = fmt.Errorf("building idemgen: %w\n%s", err, out)
		}
	})
	if idemgen.err != nil {
		t.Fatal(idemgen.err)
	}
	return idemgen.path
}

// operator runs `idemgen keys` against one database with the service's
// key label secret.
type operator struct {
	t     *testing.T
	dbURL string
	env   []string // the secret, when given through the environment
	flags []string // the secret, when given as a file
}

// keys runs `idemgen keys args…` and returns its standard output; a
// failing command fails the test unless fail is expected.
func (o operator) keys(wantFail bool, args ...string) string {
	o.t.Helper()
	args = append(append([]string{"keys", args[0], "--database-url", o.dbURL}, o.flags...), args[1:]...)
	cmd := exec.Command(idemgenBinary(o.t), args...)
	// Only the secret given here may reach the command.
	cmd.Env = append(os.Environ(), "IDEMGEN_DATABASE_URL=", "IDEMGEN_SECRET=", "IDEMGEN_KEY_LABEL_SECRET=")
	cmd.Env = append(cmd.Env, o.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if (err != nil) != wantFail {
		o.t.Fatalf("idemgen %s: err %v, want failure %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, wantFail, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// keyEntry is the part of `idemgen keys … --json` the tests read.
type keyEntry struct {
	Label      string              `json:"label"`
	Tenant     string              `json:"tenant"`
	Operation  string              `json:"operation"`
	State      string              `json:"state"`
	Version    string              `json:"version"`
	Resolvable bool                `json:"resolvable"`
	Status     int                 `json:"status"`
	Headers    map[string][]string `json:"headers"`
	Body       *string             `json:"body"`
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("idemgen keys printed no JSON: %v\n%s", err, s)
	}
	return v
}

// problemName is the last segment of a problem answer's type, or "".
func problemName(r labtest.Response) string {
	var p struct{ Type string }
	_ = json.Unmarshal(r.Body, &p)
	return p.Type[strings.LastIndex(p.Type, "/")+1:]
}

// TestOperatorResolvesSQLite: an account opening dies with its server, its
// key turns indeterminate, an operator completes it with `idemgen keys`,
// and the client's retry replays that. The secret travels as files.
func TestOperatorResolvesSQLite(t *testing.T) {
	t.Parallel()
	operatorResolves(t, labtest.SQLiteURL(t), true)
}

// TestOperatorResolvesPostgres is the same on PostgreSQL, with the secret
// in the environment.
func TestOperatorResolvesPostgres(t *testing.T) {
	t.Parallel()
	operatorResolves(t, labtest.PostgresURL(t), false)
}

func operatorResolves(t *testing.T, dbURL string, secretFile bool) {
	secret := labtest.RandomHex(16)
	op := operator{t: t, dbURL: dbURL}
	var env, flags []string
	if secretFile {
		f := filepath.Join(t.TempDir(), "key-label-secret")
		if err := os.WriteFile(f, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		flags, op.flags = []string{"--key-label-secret-file", f}, []string{"--label-secret-file", f}
	} else {
		env, op.env = []string{"KEY_LABEL_SECRET=" + secret}, []string{"IDEMGEN_KEY_LABEL_SECRET=" + secret}
	}
	args := append([]string{"--database-url", dbURL, "--api-keys", labtest.APIKeys}, flags...)

	// Opening an account is not transactional, so its key is fail-closed
	// (openapi.yaml): a server that dies after the account's writes
	// leaves a claim whose outcome no one knows.
	s := labtest.Launch(t, bins.Lab, env, append(args, "--chaos-delay", "20s")...)
	key, body, accountID := interruptAccountOpening(t, s, labtest.NewClient(t, s, labtest.KeyAcme))
	label := idemstore.KeyLabel([]byte(secret), key)

	s2 := labtest.Launch(t, bins.Server, env, args...)
	c := labtest.NewClient(t, s2, labtest.KeyAcme)
	// The retry meets the claim in flight until its lease (30 s) runs out,
	// then the key turns indeterminate. On SQLite the lease ends as the
	// new server starts, the database's only process since the kill, so
	// the first retry finds the key indeterminate.
	deadline := time.Now().Add(45 * time.Second)
	for {
		r := c.Expect(409, "POST", "/accounts", key, body)
		if name := problemName(r); name == "outcome-unknown" {
			break
		} else if name != "request-in-progress" {
			t.Fatalf("retry after the kill: %s, want 409 request-in-progress, then outcome-unknown", r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key did not turn indeterminate within 45 s; last %s", r)
		}
		time.Sleep(time.Second)
	}
	// The service logs the key under the label the operator can look up
	// (the log is read from the process's stderr, so it may lag a little).
	for logged := time.Now().Add(5 * time.Second); !loggedIndeterminate(s2.Logs(), label); {
		if time.Now().After(logged) {
			t.Fatalf("the server's log has no line naming the indeterminate key by its label %s:\n%s", label, s2.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}

	list := decodeJSON[[]keyEntry](t, op.keys(false, "list", "--state", "indeterminate", "--json"))
	if len(list) != 1 || list[0].Label != label || list[0].Tenant != "acme" || list[0].Operation != "createAccount" {
		t.Fatalf("keys list --state indeterminate: %+v, want the one key of tenant acme, createAccount, labelled %s", list, label)
	}
	shown := decodeJSON[keyEntry](t, op.keys(false, "show", "--label", label, "--json"))
	if shown.State != "indeterminate" || !shown.Resolvable || shown.Version == "" {
		t.Fatalf("keys show: %+v, want a resolvable indeterminate key with a version", shown)
	}

	// The operator finds that the account was opened, and completes the key
	// with the answer its request should have had.
	account := bytes.TrimSpace(c.Expect(200, "GET", "/accounts/"+accountID, "", "").Body)
	resolve := []string{"resolve", "--label", label, "--status", "201", "--yes",
		"--header", "Content-Type: application/json", "--header", "Location: /accounts/" + accountID,
		"--body", string(account)}
	// A version other than the one shown changes nothing.
	stale := "0" + shown.Version[1:]
	if stale == shown.Version {
		stale = "1" + shown.Version[1:]
	}
	op.keys(true, append(resolve, "--expect", stale)...)
	if out := op.keys(false, append(resolve, "--expect", shown.Version)...); !strings.Contains(out, "resolved") {
		t.Fatalf("keys resolve printed %q", out)
	}

	r := c.Expect(201, "POST", "/accounts", key, body)
	if r.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.Body, account) ||
		r.Header.Get("Location") != "/accounts/"+accountID || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("retry after the resolution: %s %v, want the resolution replayed: 201 %s", r, r.Header, account)
	}
	// The handler did not run again: one account for the request.
	var opened int
	for _, a := range c.Accounts() {
		if a.Owner == ownerOf(key) {
			opened++
		}
	}
	if opened != 1 {
		t.Fatalf("%d accounts for the request, want 1", opened)
	}
	done := decodeJSON[keyEntry](t, op.keys(false, "show", "--label", label, "--json"))
	if done.State != "completed" || done.Status != 201 || done.Body == nil || *done.Body != string(account) {
		t.Fatalf("keys show after the resolution: %+v, want completed with status 201 and the account", done)
	}
}

// loggedIndeterminate reports whether logs have a warning that names the
// key labelled label as indeterminate.
func loggedIndeterminate(logs, label string) bool {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "indeterminate") && strings.Contains(line, " key="+label) {
			return true
		}
	}
	return false
}

func ownerOf(key string) string { return "owner of " + key }

// interruptAccountOpening opens an account under a new key and kills the
// server with SIGKILL once the account exists but before its answer (the
// server pauses up to its chaos delay in between). It returns the key, the
// request's body and the account's id. A pause too short to catch is tried
// again under another key.
func interruptAccountOpening(t *testing.T, s *labtest.Server, c *labtest.Client) (key, body, accountID string) {
	t.Helper()
	for range 5 {
		key = "open-" + labtest.RandomHex(6)
		body = fmt.Sprintf(`{"owner":%q,"currency":"EUR","initial_balance":500}`, ownerOf(key))
		answered := make(chan labtest.Response, 1)
		go func() {
			r, _ := c.Do("POST", "/accounts", key, body)
			answered <- r
		}()
		for accountID == "" {
			select {
			case r := <-answered:
				t.Logf("the account of key %s was answered (%s) before the kill; trying another", key, r)
			case <-time.After(20 * time.Millisecond):
				for _, a := range c.Accounts() {
					if a.Owner == ownerOf(key) {
						accountID = a.ID
					}
				}
				continue
			}
			break
		}
		if accountID == "" {
			continue
		}
		s.Kill9()
		if r := <-answered; r.Status != 0 {
			t.Fatalf("the killed server answered %s", r)
		}
		return key, body, accountID
	}
	t.Fatal("every account opening was answered before the kill")
	return
}
