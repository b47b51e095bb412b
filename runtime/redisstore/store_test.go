package redisstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

func newClaim(key string) idemstore.Claim {
	c := claimFor(key, "tok-"+randomHex(8))
	c.OnLeaseExpiry = idemstore.Takeover
	return c
}

// Every byte a handler can write in a header value or a body comes back:
// NUL, bytes that are not UTF-8, CR and LF, a value that is empty, many
// values under one name, and a fingerprint with a NUL.
func TestBinarySafeRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newStore(t, b)
		ctx := context.Background()
		c := newClaim("bin")
		c.Fingerprint = []byte("\x00\xff{}\x00")
		want := idemstore.Response{
			Status: http.StatusCreated,
			Header: http.Header{
				"X-Bytes":      {"a\x00b\xff\xfe\r\nc", ""},
				"X-Many":       {"1", "2", "3", "\x80"},
				"Content-Type": {"application/octet-stream"},
				"\xffodd name": {"v"},
			},
			Body: []byte("\x00\x01\xff\xfe\xc3\x28 not utf-8 \x00"),
		}
		if res, err := s.Claim(ctx, c); err != nil || !res.Won {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		if err := s.Complete(ctx, c.Identity, c.Token, want); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		res, err := s.Claim(ctx, newClaim("bin"))
		if err != nil || res.Won || res.Existing.Response == nil {
			t.Fatalf("replay = %+v, %v", res, err)
		}
		if diff := cmp.Diff(want, *res.Existing.Response); diff != "" {
			t.Errorf("replayed response differs (-want +got):\n%s", diff)
		}
		if string(res.Existing.Fingerprint) != string(c.Fingerprint) {
			t.Errorf("fingerprint %q, want %q", res.Existing.Fingerprint, c.Fingerprint)
		}

		// No headers at all stay no headers.
		c2 := newClaim("no-headers")
		if _, err := s.Claim(ctx, c2); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c2.Identity, c2.Token, idemstore.Response{Status: 204}); err != nil {
			t.Fatal(err)
		}
		res, err = s.Claim(ctx, newClaim("no-headers"))
		if err != nil || res.Existing.Response == nil {
			t.Fatalf("replay = %+v, %v", res, err)
		}
		if diff := cmp.Diff(idemstore.Response{Status: 204}, *res.Existing.Response); diff != "" {
			t.Errorf("replayed response differs (-want +got):\n%s", diff)
		}
	})
}

// The identity is hashed into the hash tag, so a client's key with braces
// in it cannot pick the slot, and identities whose parts run together
// ("a"+"bc" and "ab"+"c") are different keys.
func TestKeyNames(t *testing.T) {
	s, err := redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithPrefix("app:"))
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]idemstore.Identity)
	for _, id := range []idemstore.Identity{
		{Tenant: "a", Scope: "bc", Key: "k"},
		{Tenant: "ab", Scope: "c", Key: "k"},
		{Tenant: "t", Scope: "", Key: "op{x}"},
		{Tenant: "t", Scope: "op", Key: "{x}"},
		{Tenant: "t", Scope: "op", Key: "}{"},
	} {
		k := s.Key(id)
		if prev, dup := seen[k]; dup {
			t.Errorf("%+v and %+v share the key %s", prev, id, k)
		}
		seen[k] = id
		open, close := strings.Index(k, "{"), strings.Index(k, "}")
		if !strings.HasPrefix(k, "app:{") || open != len("app:") || close != len(k)-1 || close-open-1 != 64 {
			t.Errorf("Key(%+v) = %q, want app:{<64 hex digits>}", id, k)
		}
	}
	if _, err := redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithPrefix("app:{x}:")); err == nil {
		t.Errorf("New accepted a prefix with braces")
	}
}

// The record carries its own expiry: Redis deletes it when the TTL ends,
// with no sweeper. A takeover whose lease would outlive the record moves
// the expiry with it (docs/semantics.md §7.4); one that ends before
// leaves it.
func TestRecordExpiresByItself(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, c := newStore(t, b)
		ctx := context.Background()
		// PTTL may read up to 1ms above the TTL: the deadline is rounded
		// up to Redis's millisecond.
		pttl := func(id idemstore.Identity) time.Duration {
			t.Helper()
			d, err := c.PTTL(ctx, s.Key(id)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}

		cl := newClaim("ttl")
		cl.TTL, cl.Lease = time.Hour, time.Minute
		if _, err := s.Claim(ctx, cl); err != nil {
			t.Fatal(err)
		}
		if d := pttl(cl.Identity); d <= time.Hour-5*time.Second || d > time.Hour+time.Millisecond {
			t.Errorf("PTTL after a claim with a 1h TTL = %v", d)
		}
		if err := s.Complete(ctx, cl.Identity, cl.Token, idemstore.Response{Status: 201}); err != nil {
			t.Fatal(err)
		}
		if d := pttl(cl.Identity); d <= time.Hour-5*time.Second || d > time.Hour+time.Millisecond {
			t.Errorf("PTTL after completion = %v, want the claim's expiry kept", d)
		}

		// TTL 700ms, lease 300ms: taken over at ~400ms with a 1s lease, the
		// lease would end at ~1.4s, past the record's 700ms.
		first := newClaim("moved")
		first.TTL, first.Lease = 700*time.Millisecond, 300*time.Millisecond
		start := time.Now()
		if res, err := s.Claim(ctx, first); err != nil || !res.Won {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		time.Sleep(400 * time.Millisecond)
		second := newClaim("moved")
		second.TTL, second.Lease = 700*time.Millisecond, time.Second
		if res, err := s.Claim(ctx, second); err != nil || !res.TookOver {
			t.Fatalf("takeover = %+v, %v", res, err)
		}
		if d := pttl(second.Identity); d < 800*time.Millisecond || d > time.Second+time.Millisecond {
			t.Errorf("PTTL after the takeover = %v, want about the new lease (1s)", d)
		}
		// Past the first claim's TTL, within the new lease: still held.
		time.Sleep(time.Until(start.Add(900 * time.Millisecond)))
		if time.Since(start) < 1300*time.Millisecond {
			res, err := s.Claim(ctx, newClaim("moved"))
			if err != nil || res.Won || res.Existing.State != idemstore.StateInFlight {
				t.Errorf("claim within the moved lease = %+v, %v; want lost in flight", res, err)
			}
			if err := s.Complete(ctx, second.Identity, second.Token, idemstore.Response{Status: 201}); err != nil {
				t.Errorf("holder's Complete within its lease: %v", err)
			}
		}
		// Redis removes the record when the moved expiry passes.
		time.Sleep(time.Until(start.Add(1600 * time.Millisecond)))
		if n, err := c.Exists(ctx, s.Key(second.Identity)).Result(); err != nil || n != 0 {
			t.Errorf("record after its expiry: exists %d, %v; want removed by Redis", n, err)
		}
	})
}

// duplicator sends every script twice, as a client does that retries a
// command whose reply it lost: the first run's reply is thrown away.
type duplicator struct{}

func (duplicator) DialHook(next redis.DialHook) redis.DialHook { return next }

func (duplicator) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			_ = next(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

func (duplicator) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A script sent again after its reply was lost answers as the first run
// did: the claim is won, the completion stored, the abandonment made. A
// second call of the same holder is still fenced.
func TestRetriedScriptsAnswerAsTheFirstRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		c := b.open(t)
		s := storeOn(t, c)
		c.AddHook(duplicator{})
		ctx := context.Background()

		cl := newClaim("retried")
		res, err := s.Claim(ctx, cl)
		if err != nil || !res.Won {
			t.Fatalf("retried Claim = %+v, %v; want won", res, err)
		}
		if err := s.Complete(ctx, cl.Identity, cl.Token, idemstore.Response{Status: 201, Body: []byte("x")}); err != nil {
			t.Fatalf("retried Complete: %v", err)
		}
		if err := s.Complete(ctx, cl.Identity, cl.Token, idemstore.Response{Status: 201}); !errors.Is(err, idemstore.ErrFenced) {
			t.Errorf("second Complete: %v, want ErrFenced", err)
		}
		if res, err := s.Claim(ctx, newClaim("retried")); err != nil || res.Existing.Response == nil || string(res.Existing.Response.Body) != "x" {
			t.Errorf("replay = %+v, %v", res, err)
		}

		ab := newClaim("abandoned")
		if res, err := s.Claim(ctx, ab); err != nil || !res.Won {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		if err := s.Abandon(ctx, ab.Identity, ab.Token, idemstore.FailClosed); err != nil {
			t.Fatalf("retried Abandon(fail-closed): %v", err)
		}
		if err := s.Abandon(ctx, ab.Identity, ab.Token, idemstore.FailClosed); !errors.Is(err, idemstore.ErrFenced) {
			t.Errorf("second Abandon: %v, want ErrFenced", err)
		}
	})
}

// The fingerprint's hash matters only to the engine; the store keeps any
// bytes, including none.
func TestEmptyFingerprint(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newStore(t, b)
		c := newClaim("nofp")
		c.Fingerprint = nil
		if res, err := s.Claim(context.Background(), c); err != nil || !res.Won {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		other := newClaim("nofp")
		sum := sha256.Sum256(nil)
		other.Fingerprint = sum[:]
		res, err := s.Claim(context.Background(), other)
		if err != nil || res.Won || len(res.Existing.Fingerprint) != 0 {
			t.Fatalf("other request = %+v, %v; want lost to the empty fingerprint", res, err)
		}
	})
}
