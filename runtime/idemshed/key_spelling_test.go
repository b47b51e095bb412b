package idemshed

import (
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/key"
)

// The engine reads an Idempotency-Key header as an RFC 8941 string when it
// is quoted (key.Parse, docs/semantics.md §2): k and "k" are one key, one
// request. HeaderKey takes the header's value as it stands, so to the
// Shedder they are two requests. A client refused once under k has its
// request served under "k" and the Shedder still remembers k as an old
// refusal: a copy sent as k while "k" is served is a retry, and k stays a
// retry after "k" was served, where the package documentation promises
// that a request is "forgotten once an attempt of it is served" and that
// "a copy of a request being served is no retry" (copies take places
// ahead of, and displace, other clients' first attempts).
func TestQuotedKeySpellingIsOneRequest(t *testing.T) {
	for _, spelled := range []string{`"k"`, "k"} {
		if got, err := key.Parse(spelled, 64); err != nil || got != "k" {
			t.Fatalf("key.Parse(%s) = %q, %v; the engine reads it as k", spelled, got, err)
		}
	}
	s, move := keyed(t, 1)
	refusedAgo(t, s, "k", move, 30*time.Second)
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serveKey(h, "retry", `"k"`) })
	<-b.entered
	var broken []string
	if isRetry(s, request("", "POST", "/t", "k", false)) {
		broken = append(broken, `while its attempt under "k" is served, a copy under k is a retry`)
	}
	close(b.release)
	wg.Wait()
	if isRetry(s, request("", "POST", "/t", "k", false)) {
		broken = append(broken, `after its attempt under "k" was served, a copy under k is still a retry dated by the first refusal`)
	}
	if len(broken) > 0 {
		t.Errorf("the request the engine reads under key k, refused once and served as \"k\": %q", broken)
	}
}
