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
