package server

import (
	"context"
	"crypto/subtle"
	"math"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/time/rate"
)

type tenantKey struct{}

// TenantFromRequest returns the tenant that authenticated r. The
// idempotency engine calls it to scope keys.
func TenantFromRequest(r *http.Request) (string, bool) {
	t, ok := r.Context().Value(tenantKey{}).(string)
	return t, ok && t != ""
}

// authenticate resolves the bearer key to its tenant or answers 401.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		scheme, key, ok := strings.Cut(auth, " ")
		tenant := ""
		if ok && strings.EqualFold(scheme, "Bearer") {
			tenant = s.lookupKey(strings.TrimSpace(key))
		}
		if tenant == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="petstore-payments"`)
			s.writeProblem(w, http.StatusUnauthorized, ProblemUnauthorized,
				"send Authorization: Bearer <key> with a valid API key", 0)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

// lookupKey compares against every key in constant time, so that response
// timing does not reveal how much of a guessed key was right.
func (s *Server) lookupKey(key string) string {
	tenant := ""
	for k, t := range s.keys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			tenant = t
		}
	}
	return tenant
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
			secs := max(1, int(math.Ceil(delay.Seconds())))
			s.writeProblem(w, http.StatusTooManyRequests, ProblemRateLimited,
				"this API key is over its request rate; retry after the Retry-After seconds", secs)
			return
		}
		next.ServeHTTP(w, r)
	})
}
