package server

import (
	"strconv"
	"testing"
	"time"
)

// TestFailLimiter: ten failures pass, the eleventh waits six seconds (ten a
// minute), and the memory of addresses stays bounded.
func TestFailLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newFailLimiter(10)
	l.now = func() time.Time { return now }
	for i := range 10 {
		if w := l.wait("192.0.2.1"); w != 0 {
			t.Fatalf("failure %d: wait %v before the allowance is spent", i+1, w)
		}
		if w := l.fail("192.0.2.1"); w != 0 {
			t.Fatalf("failure %d: refused, want allowed", i+1)
		}
	}
	if w := l.wait("192.0.2.1"); w != 6*time.Second {
		t.Fatalf("after ten failures: wait %v, want 6s", w)
	}
	if w := l.wait("192.0.2.2"); w != 0 {
		t.Fatalf("another address waits %v", w)
	}
	now = now.Add(6 * time.Second)
	if w := l.fail("192.0.2.1"); w != 0 {
		t.Fatalf("after 6s: refused (%v)", w)
	}
	if w := l.fail("192.0.2.1"); w != 6*time.Second {
		t.Fatalf("again at once: wait %v, want 6s", w)
	}

	for i := range 3 * maxFailAddrs {
		l.fail("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
		if len(l.addrs) > maxFailAddrs {
			t.Fatalf("%d addresses remembered, more than %d", len(l.addrs), maxFailAddrs)
		}
	}
}

// TestKeyringLookup: keys of any length find their tenant and nothing else.
func TestKeyringLookup(t *testing.T) {
	ring := newKeyring(map[string]string{"k": "short", "a-much-longer-key-" + string(make([]byte, 100)): "long"})
	for key, want := range map[string]string{
		"k": "short", "a-much-longer-key-" + string(make([]byte, 100)): "long",
		"": "", "K": "", "k ": "", "a-much-longer-key-": "",
	} {
		if got := ring.lookup(key); got != want {
			t.Errorf("lookup(%q) = %q, want %q", key, got, want)
		}
	}
}

// An address that has spent its allowance keeps waiting however many other
// addresses fail meanwhile: failing once from each of more addresses than
// the limiter remembers does not reset anyone's penalty.
func TestFailLimiterKeepsPenaltiesWhenFull(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newFailLimiter(10)
	l.now = func() time.Time { return now }
	for range 10 {
		l.fail("192.0.2.1")
	}
	if w := l.wait("192.0.2.1"); w == 0 {
		t.Fatal("after ten failures: no wait")
	}
	for i := range maxFailAddrs + 10 {
		l.fail("10." + strconv.Itoa(i/65536) + "." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256))
	}
	if w := l.wait("192.0.2.1"); w == 0 {
		t.Fatalf("after %d other addresses failed once: the penalised address may guess again", maxFailAddrs+10)
	}
	if len(l.addrs) > maxFailAddrs {
		t.Fatalf("%d addresses remembered, more than %d", len(l.addrs), maxFailAddrs)
	}
	// Addresses past the bound share one allowance: they cannot guess
	// freely while the limiter is full of recent failures.
	allowed := 0
	for i := range 100 {
		if l.wait("172.16.0."+strconv.Itoa(i)) == 0 && l.fail("172.16.0."+strconv.Itoa(i)) == 0 {
			allowed++
		}
	}
	if allowed > 10 {
		t.Fatalf("%d failures from new addresses allowed while the limiter was full, want at most 10", allowed)
	}
	// Past a minute every bucket is full again, and a new address is
	// remembered in place of the least recently failed one.
	now = now.Add(time.Minute + time.Second)
	if w := l.fail("198.51.100.7"); w != 0 {
		t.Fatalf("past a minute a new address waits %v", w)
	}
	if _, ok := l.addrs["198.51.100.7"]; !ok {
		t.Fatal("past a minute a new address is not remembered")
	}
}

// The addresses of one IPv6 /64, which a single customer line or host is
// given, share one allowance; another /64 has its own.
func TestFailLimiterGroupsIPv6By64(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newFailLimiter(10)
	l.now = func() time.Time { return now }
	for i := range 10 {
		if w := l.fail("2001:db8:1:2::" + strconv.FormatInt(int64(i+1), 16)); w != 0 {
			t.Fatalf("failure %d: refused, want allowed", i+1)
		}
	}
	if w := l.wait("2001:db8:1:2:ffff:ffff:ffff:ffff"); w == 0 {
		t.Fatal("another address of the same /64 is not throttled")
	}
	if w := l.wait("2001:db8:1:3::1"); w != 0 {
		t.Fatalf("an address of another /64 waits %v", w)
	}
	// An IPv4 address written as IPv6 is the IPv4 address.
	for range 10 {
		l.fail("::ffff:192.0.2.9")
	}
	if w := l.wait("192.0.2.9"); w == 0 {
		t.Fatal("192.0.2.9 is not throttled after ten failures as ::ffff:192.0.2.9")
	}
}
