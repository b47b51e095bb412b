package main_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"
)

// retryUntilDone posts until the answer is final (not 409 in progress, not
// 503, not a transport error), honouring Retry-After, for at most d.
func retryUntilDone(t *testing.T, c *client, path, key, body string, d time.Duration) response {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r, err := c.do("POST", path, key, body)
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
func memoCounts(c *client, account string) map[string]int {
	n := map[string]int{}
	for _, tr := range c.transfers(account) {
		n[tr.Memo]++
	}
	return n
}

func TestKillDuringRequestSQLite(t *testing.T) {
	t.Parallel()
	killDuringRequest(t, sqliteURL(t), 4)
}

func TestKillDuringRequestPostgres(t *testing.T) {
	t.Parallel()
	killDuringRequest(t, postgresURL(t), 8)
}

// killDuringRequest sends n transfers to a server that pauses after its
// writes, kills it with SIGKILL while they are in flight, restarts it on
// the same database and retries every key: each key must end with exactly
// one transfer, and every 201 sent before the kill must still be true.
func killDuringRequest(t *testing.T, dbURL string, n int) {
	s := startLab(t, dbURL, "--chaos-delay", "1500ms")
	c := newClient(t, s, keyAcme)
	from, to := c.createAccount("from", "EUR", 1_000_000), c.createAccount("to", "EUR", 0)

	type outcome struct {
		key  string
		body string
		resp response
		err  error
	}
	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range outcomes {
		key := "kill-" + strconv.Itoa(i) + "-" + randomHex(4)
		outcomes[i].key, outcomes[i].body = key, transferBody(from, to, 100+i, key)
		wg.Go(func() {
			outcomes[i].resp, outcomes[i].err = c.do("POST", "/transfers", key, outcomes[i].body)
		})
	}
	time.Sleep(700 * time.Millisecond)
	s.kill9()
	wg.Wait()

	acked := 0
	s2 := startServer(t, dbURL)
	c2 := newClient(t, s2, keyAcme)
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
			var tr transfer
			_ = json.Unmarshal(o.resp.Body, &tr)
			c2.expect(200, "GET", "/transfers/"+tr.ID, "", "")
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
	if c2.balance(from) != 1_000_000-total || c2.balance(to) != total {
		t.Errorf("balances %d and %d, want %d and %d", c2.balance(from), c2.balance(to), 1_000_000-total, total)
	}
	t.Logf("%d of %d transfers were acknowledged before the kill; all %d exist exactly once", acked, n, n)
}

// TestTwoServersPostgres races two server processes on one database with
// the same keys: one transfer per key.
func TestTwoServersPostgres(t *testing.T) {
	t.Parallel()
	dbURL := postgresURL(t)
	var servers [2]*server
	var wg sync.WaitGroup
	// Both start at once, so their migrations race too.
	for i := range servers {
		wg.Go(func() { servers[i] = startServer(t, dbURL) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c0, c1 := newClient(t, servers[0], keyAcme), newClient(t, servers[1], keyAcme)
	from, to := c0.createAccount("from", "EUR", 1_000_000), c0.createAccount("to", "EUR", 0)

	const keys, copies = 15, 4
	answers := make([][]response, keys)
	var total int64
	for k := range keys {
		answers[k] = make([]response, copies)
		key := "race-" + strconv.Itoa(k) + "-" + randomHex(4)
		body := transferBody(from, to, 10+k, key)
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
	if c1.balance(from) != 1_000_000-total || c0.balance(to) != total {
		t.Errorf("balances %d and %d, want %d and %d", c1.balance(from), c0.balance(to), 1_000_000-total, total)
	}
}
