package main_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// retryUntilDone posts until the answer is final (not 409 in progress, not
// 503, not a transport error), honouring Retry-After, for at most d.
func retryUntilDone(t *testing.T, c *labtest.Client, path, key, body string, d time.Duration) labtest.Response {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r, err := c.Do("POST", path, key, body)
		if err == nil && r.Status != 409 && r.Status != 503 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s: no final answer within %v; last %v %v", key, d, r, err)
		}
		wait := 200 * time.Millisecond
		if err == nil {
			if s, _ := strconv.Atoi(r.Header.Get("Retry-After")); s > 0 {
				wait = min(time.Duration(s)*time.Second, time.Second)
			}
		}
		time.Sleep(wait)
	}
}

// memoCounts counts an account's transfers by memo.
func memoCounts(c *labtest.Client, account string) map[string]int {
	n := map[string]int{}
	for _, tr := range c.Transfers(account) {
		n[tr.Memo]++
	}
	return n
}

func TestKillDuringRequestSQLite(t *testing.T) {
	t.Parallel()
	killDuringRequest(t, labtest.SQLiteURL(t), 4)
}

func TestKillDuringRequestPostgres(t *testing.T) {
	t.Parallel()
	killDuringRequest(t, labtest.PostgresURL(t), 8)
}

// killDuringRequest sends n transfers to a server that pauses after its
// writes, kills it with SIGKILL while they are in flight, restarts it on
// the same database and retries every key: each key must end with exactly
// one transfer, and every 201 sent before the kill must still be true.
func killDuringRequest(t *testing.T, dbURL string, n int) {
	s := bins.StartLab(t, dbURL, "--chaos-delay", "1500ms")
	c := labtest.NewClient(t, s, labtest.KeyAcme)
	from, to := c.CreateAccount("from", "EUR", 1_000_000), c.CreateAccount("to", "EUR", 0)

	type outcome struct {
		key  string
		body string
		resp labtest.Response
		err  error
	}
	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range outcomes {
		key := "kill-" + strconv.Itoa(i) + "-" + labtest.RandomHex(4)
		outcomes[i].key, outcomes[i].body = key, labtest.TransferBody(from, to, 100+i, key)
		wg.Go(func() {
			outcomes[i].resp, outcomes[i].err = c.Do("POST", "/transfers", key, outcomes[i].body)
		})
	}
	time.Sleep(700 * time.Millisecond)
	s.Kill9()
	wg.Wait()

	acked := 0
	s2 := bins.StartServer(t, dbURL)
	c2 := labtest.NewClient(t, s2, labtest.KeyAcme)
	for _, o := range outcomes {
		r := retryUntilDone(t, c2, "/transfers", o.key, o.body, 40*time.Second)
		if r.Status != 201 {
			t.Fatalf("key %s after restart: %s", o.key, r)
		}
		if o.err == nil && o.resp.Status == 201 {
			acked++
			if !bytes.Equal(o.resp.Body, r.Body) {
				t.Errorf("key %s: acknowledged before the kill as\n%s\nbut answers after it\n%s", o.key, o.resp.Body, r.Body)
			}
			var tr labtest.Transfer
			_ = json.Unmarshal(o.resp.Body, &tr)
			c2.Expect(200, "GET", "/transfers/"+tr.ID, "", "")
		}
	}
	counts := memoCounts(c2, from)
	var total int64
	for i, o := range outcomes {
		if counts[o.key] != 1 {
			t.Errorf("key %s: %d transfers, want exactly 1", o.key, counts[o.key])
		}
		total += int64(100 + i)
	}
	if c2.Balance(from) != 1_000_000-total || c2.Balance(to) != total {
		t.Errorf("balances %d and %d, want %d and %d", c2.Balance(from), c2.Balance(to), 1_000_000-total, total)
	}
	t.Logf("%d of %d transfers were acknowledged before the kill; all %d exist exactly once", acked, n, n)
}

// TestTwoServersPostgres races two server processes on one database with
// the same keys: one transfer per key.
func TestTwoServersPostgres(t *testing.T) {
	t.Parallel()
	dbURL := labtest.PostgresURL(t)
	var servers [2]*labtest.Server
	var wg sync.WaitGroup
	// Both start at once, so their migrations race too.
	for i := range servers {
		wg.Go(func() { servers[i] = bins.StartServer(t, dbURL) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c0, c1 := labtest.NewClient(t, servers[0], labtest.KeyAcme), labtest.NewClient(t, servers[1], labtest.KeyAcme)
	from, to := c0.CreateAccount("from", "EUR", 1_000_000), c0.CreateAccount("to", "EUR", 0)

	const keys, copies = 15, 4
	answers := make([][]labtest.Response, keys)
	var total int64
	for k := range keys {
		answers[k] = make([]labtest.Response, copies)
		key := "race-" + strconv.Itoa(k) + "-" + labtest.RandomHex(4)
		body := labtest.TransferBody(from, to, 10+k, key)
		total += int64(10 + k)
		for i := range copies {
			c := c0
			if i%2 == 1 {
				c = c1
			}
			wg.Go(func() { answers[k][i] = retryUntilDone(t, c, "/transfers", key, body, 30*time.Second) })
		}
	}
	wg.Wait()
	counts := memoCounts(c1, from)
	if len(counts) != keys {
		t.Errorf("%d distinct transfers, want %d", len(counts), keys)
	}
	for k, rs := range answers {
		for _, r := range rs {
			if r.Status != 201 || !bytes.Equal(r.Body, rs[0].Body) {
				t.Errorf("key %d: answers differ: %s vs %s", k, r, rs[0])
			}
		}
	}
	for memo, n := range counts {
		if n != 1 {
			t.Errorf("%s: %d transfers", memo, n)
		}
	}
	if c1.Balance(from) != 1_000_000-total || c0.Balance(to) != total {
		t.Errorf("balances %d and %d, want %d and %d", c1.Balance(from), c0.Balance(to), 1_000_000-total, total)
	}
}
