package server

import (
	"container/list"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

type tenantKey struct{}

// TenantFromRequest returns the tenant that authenticated r. The
// idempotency engine calls it to scope keys.
func TenantFromRequest(r *http.Request) (string, bool) {
	t, ok := r.Context().Value(tenantKey{}).(string)
	return t, ok && t != ""
}

// authenticate resolves the bearer key to its tenant or answers 401. A
// client address that has failed too often is answered 429 without its key
// being looked at, so that guessing keys costs time; a client that shares
// the address with a guesser waits too, which is the price of not trusting
// forwarding headers anyone can write.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := clientAddr(r)
		if wait := s.authFails.wait(addr); wait > 0 {
			s.writeProblem(w, http.StatusTooManyRequests, ProblemRateLimited,
				"too many failed authentications from this address; retry after the Retry-After seconds", retrySeconds(wait))
			return
		}
		auth := r.Header.Get("Authorization")
		scheme, key, ok := strings.Cut(auth, " ")
		tenant := ""
		if ok && strings.EqualFold(scheme, "Bearer") {
			tenant = s.keys.lookup(strings.TrimSpace(key))
		}
		if tenant == "" {
			// Checked again here: concurrent guesses may all have passed
			// the check above while one failure was left.
			if wait := s.authFails.fail(addr); wait > 0 {
				s.writeProblem(w, http.StatusTooManyRequests, ProblemRateLimited,
					"too many failed authentications from this address; retry after the Retry-After seconds", retrySeconds(wait))
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="petstore-payments"`)
			s.writeProblem(w, http.StatusUnauthorized, ProblemUnauthorized,
				"send Authorization: Bearer <key> with a valid API key", 0)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

// clientAddr is the host of the connection's peer.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func retrySeconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// keyDigest is the SHA-256 of an API key.
type keyDigest = [sha256.Size]byte

// keyring maps the digest of each API key to its tenant. Comparing digests
// rather than keys makes every comparison the same length, so the time a
// lookup takes says nothing about a guessed key's length or prefix.
type keyring []struct {
	digest keyDigest
	tenant string
}

func newKeyring(keys map[string]string) keyring {
	var ring keyring
	for k, t := range keys {
		ring = append(ring, struct {
			digest keyDigest
			tenant string
		}{sha256.Sum256([]byte(k)), t})
	}
	return ring
}

// lookup compares the key's digest with every digest, without stopping at a
// match, and returns the tenant or "".
func (ring keyring) lookup(key string) string {
	d := sha256.Sum256([]byte(key))
	tenant := ""
	for _, e := range ring {
		if subtle.ConstantTimeCompare(e.digest[:], d[:]) == 1 {
			tenant = e.tenant
		}
	}
	return tenant
}

// maxFailAddrs bounds the address groups whose failures are remembered. A
// group is forgotten only once its bucket is full again, which it is a
// minute after its last failure at the latest, so no failure that still
// counts is dropped to make room: an attacker cannot wipe their own penalty
// by failing once from many addresses. While every remembered group has
// failed within that minute, the groups beyond the bound share one bucket,
// so that many addresses buy one allowance between them, not one each.
const maxFailAddrs = 10_000

// failLimiter throttles failed authentications per client address group
// (addrGroup): a token bucket of perMinute tokens, refilled at perMinute a
// minute, from which each failure takes one. A nil failLimiter throttles
// nothing.
type failLimiter struct {
	mu        sync.Mutex
	perMinute int
	addrs     map[string]*list.Element // of *failGroup, by group
	recent    *list.List               // the groups, the last to fail first
	overflow  *rate.Limiter            // shared by the groups past the bound
	now       func() time.Time
}

// failGroup is one remembered address group and its bucket.
type failGroup struct {
	name string
	lim  *rate.Limiter
}

func newFailLimiter(perMinute int) *failLimiter {
	if perMinute <= 0 {
		return nil
	}
	l := &failLimiter{perMinute: perMinute, addrs: map[string]*list.Element{}, recent: list.New(), now: time.Now}
	l.overflow = l.bucket()
	return l
}

func (l *failLimiter) bucket() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(float64(l.perMinute)/60), l.perMinute)
}

// wait is how long addr must wait before its key is looked at; 0 when it
// has failures left.
func (l *failLimiter) wait(addr string) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	lim := l.find(addrGroup(addr), now, false)
	if lim == nil {
		return 0
	}
	return untilToken(lim, now)
}

// fail records a failed authentication from addr. It returns 0 when the
// failure fitted in addr's allowance, else how long addr must wait.
func (l *failLimiter) fail(addr string) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	lim := l.find(addrGroup(addr), now, true)
	if lim.AllowN(now, 1) {
		return 0
	}
	return untilToken(lim, now)
}

// find returns the bucket group's failures are counted in: its own, the
// shared overflow when the limiter is full of groups that failed within
// the minute, or (unless failing) nil when group has no failures to count.
// A failing group is remembered, in place of the least recently failed
// one if that one's bucket is full again.
func (l *failLimiter) find(group string, now time.Time, failing bool) *rate.Limiter {
	if e, ok := l.addrs[group]; ok {
		if failing {
			l.recent.MoveToFront(e)
		}
		return e.Value.(*failGroup).lim
	}
	if len(l.addrs) >= maxFailAddrs {
		// The least recently failed group is the first whose bucket
		// refills; while it has not, none is known to have.
		oldest := l.recent.Back()
		if oldest.Value.(*failGroup).lim.TokensAt(now) < float64(l.perMinute) {
			return l.overflow
		}
		if failing {
			delete(l.addrs, oldest.Value.(*failGroup).name)
			l.recent.Remove(oldest)
		}
	}
	if !failing {
		return nil
	}
	g := &failGroup{name: group, lim: l.bucket()}
	l.addrs[group] = l.recent.PushFront(g)
	return g.lim
}

// addrGroup is what failures are counted by: an IPv4 address, or the /64
// of an IPv6 one, since a single host or customer line is given a whole
// /64 and may send from any address in it.
func addrGroup(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return addr
	}
	return p.String()
}

// untilToken is the time until lim holds one whole token again.
func untilToken(lim *rate.Limiter, now time.Time) time.Duration {
	tokens := lim.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) / float64(lim.Limit()) * float64(time.Second))
}

// limiters holds one token bucket per tenant.
type limiters struct {
	mu      sync.Mutex
	perSec  float64
	tenants map[string]*rate.Limiter
}

func (l *limiters) get(tenant string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.tenants[tenant]
	if !ok {
		burst := max(1, int(math.Ceil(l.perSec)))
		lim = rate.NewLimiter(rate.Limit(l.perSec), burst)
		l.tenants[tenant] = lim
	}
	return lim
}

// rateLimit answers 429 with Retry-After when the tenant is over its rate.
// It runs before the idempotency layer, so a 429 never touches a key.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	if s.limits == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, _ := TenantFromRequest(r)
		res := s.limits.get(tenant).Reserve()
		if delay := res.Delay(); delay > 0 {
			res.Cancel()
			s.writeProblem(w, http.StatusTooManyRequests, ProblemRateLimited,
				"this API key is over its request rate; retry after the Retry-After seconds", retrySeconds(delay))
			return
		}
		next.ServeHTTP(w, r)
	})
}
