package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An operator's first command works without the label secret: every row
// is listed with its operation, state, age and status, and only the label
// of a key stored in clear is unknown, never one computed under no secret.
func TestKeysListWithoutLabelSecret(t *testing.T) {
	eachKeysStore(t, func(t *testing.T, st keysStore) {
		newKeysService(t, st.store).strand("order-0048213")
		t.Setenv(envLabelSecret, "")

		code, out, errOut := st.keys(t, "", "list")
		if code != 0 {
			t.Fatalf("list without the label secret: exit %d, stderr %s", code, errOut)
		}
		row := ""
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "createTransfer") {
				row = line
			}
		}
		if !strings.HasPrefix(row, labelUnknown+" ") || !strings.Contains(row, "indeterminate") || !strings.Contains(out, envLabelSecret) {
			t.Fatalf("list without the label secret:\n%s\nwant the indeterminate createTransfer row, its label %s, and how to give the secret", out, labelUnknown)
		}

		code, out, errOut = st.keys(t, "", "list", "--json")
		var listed []jsonEntry
		if code != 0 || json.Unmarshal([]byte(out), &listed) != nil {
			t.Fatalf("list --json: exit %d, stdout %s, stderr %s", code, out, errOut)
		}
		if len(listed) != 1 || listed[0].Label != "" || listed[0].Operation != "createTransfer" || listed[0].State != "indeterminate" || listed[0].Version == "" {
			t.Fatalf("list --json = %+v; want the one row with an empty label", listed)
		}

		// Finding a key by its label still needs the secret.
		if code, _, errOut := st.keys(t, "", "show", "--label", "hmac:00000000000000000000"); code != 1 || !strings.Contains(errOut, envLabelSecret) {
			t.Fatalf("show --label without the secret: exit %d, stderr %s", code, errOut)
		}
	})
}

// resolve refuses a version that no longer names the key, and a key whose
// outcome is known, before it asks the operator to confirm anything.
func TestKeysResolveChecksExpectBeforeAsking(t *testing.T) {
	t.Setenv(envLabelSecret, testSecret)
	eachKeysStore(t, func(t *testing.T, st keysStore) {
		svc := newKeysService(t, st.store)
		svc.strand("order-0048213")
		if w := svc.post("order-0048214"); w.Code != 201 {
			t.Fatalf("POST: %d", w.Code)
		}
		resolve := func(key, version string) (int, string) {
			code, _, errOut := st.keys(t, "y\n", "resolve", "--tenant", "acme", "--scope", "createTransfer", "--key", key,
				"--expect", version, "--status", "201", "--body", `{}`)
			return code, errOut
		}
		if code, errOut := resolve("order-0048213", "000000000000"); code != 1 || !strings.Contains(errOut, "changed") || strings.Contains(errOut, "Proceed?") {
			t.Fatalf("resolve with a stale version: exit %d, stderr %s; want refused unasked", code, errOut)
		}
		code, out, _ := st.keys(t, "", "show", "--tenant", "acme", "--scope", "createTransfer", "--key", "order-0048214", "--json")
		var done jsonEntry
		if code != 0 || json.Unmarshal([]byte(out), &done) != nil {
			t.Fatalf("show: exit %d, %s", code, out)
		}
		if code, errOut := resolve("order-0048214", done.Version); code != 1 || !strings.Contains(errOut, "not outcome-unknown") || strings.Contains(errOut, "Proceed?") {
			t.Fatalf("resolve of a completed key: exit %d, stderr %s; want refused unasked", code, errOut)
		}
	})
}

// After a rename with previousOperationId, keys are stored under the old
// name; --operation with the new ID finds them through the lock file.
func TestKeysOperationFollowsARename(t *testing.T) {
	t.Setenv(envLabelSecret, testSecret)
	eachKeysStore(t, func(t *testing.T, st keysStore) {
		newKeysService(t, st.store).strand("order-0048213")
		lock := filepath.Join(t.TempDir(), "idempotency.lock.json")
		if err := os.WriteFile(lock, []byte(renamedLock), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"list", "--lock", lock, "--operation", "sendTransfer", "--json"},
			{"list", "--operation", "createTransfer", "--json"},
		} {
			code, out, errOut := st.keys(t, "", args...)
			var listed []jsonEntry
			if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 1 || listed[0].Operation != "createTransfer" {
				t.Fatalf("%v: exit %d, stdout %s, stderr %s; want the key stored under createTransfer", args, code, out, errOut)
			}
		}
		label := listed(t, st)
		if code, out, errOut := st.keys(t, "", "show", "--lock", lock, "--label", label, "--operation", "sendTransfer"); code != 0 || !strings.Contains(out, "indeterminate") {
			t.Fatalf("show --operation sendTransfer: exit %d, stdout %s, stderr %s", code, out, errOut)
		}
		// A label under the renamed operation that names no key is not found.
		if code, _, errOut := st.keys(t, "", "show", "--lock", lock, "--label", "hmac:00000000000000000000", "--operation", "sendTransfer"); code != 1 || !strings.Contains(errOut, "no such key") {
			t.Fatalf("show of an absent label: exit %d, stderr %s; want no such key", code, errOut)
		}
		if code, _, errOut := st.keys(t, "", "list", "--lock", filepath.Join(t.TempDir(), "absent.json"), "--operation", "sendTransfer"); code != 1 || !strings.Contains(errOut, "--lock") {
			t.Fatalf("list with a missing --lock: exit %d, stderr %s", code, errOut)
		}
	})
}

// listed returns the label of the one key in st.
func listed(t *testing.T, st keysStore) string {
	t.Helper()
	code, out, errOut := st.keys(t, "", "list", "--json")
	var es []jsonEntry
	if code != 0 || json.Unmarshal([]byte(out), &es) != nil || len(es) != 1 {
		t.Fatalf("list: exit %d, stdout %s, stderr %s", code, out, errOut)
	}
	return es[0].Label
}

// renamedLock is the lock file of a service that renamed createTransfer
// to sendTransfer with previousOperationId: createTransfer.
const renamedLock = `{
  "comment": "lock",
  "version": 1,
  "operations": [
    {
      "method": "POST",
      "path": "/transfers",
      "operationId": "sendTransfer",
      "storedAs": "createTransfer",
      "scope": "operation",
      "key": "header:Idempotency-Key",
      "ttlSeconds": 86400,
      "leaseSeconds": 60,
      "onLeaseExpiry": "fail-closed",
      "transactional": false
    }
  ]
}
`
