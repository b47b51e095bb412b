package dayreplay

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// The Independent client's backoff and its cap on Retry-After.
const (
	independentBackoffBase = 25 * time.Millisecond
	independentBackoffMax  = time.Second
	independentHintMax     = 2 * time.Second
)

// sendIndependent makes one logical request under key as the Independent
// client does: the same key and body on every attempt, each attempt cut
// off after a timeout drawn anew, and the wait before the next as
// independentWait says. It stops on a final answer (any status but 409,
// 429 and 5xx with Retry-After, and 5xx without), when its attempts or its
// budget run out, or when the day ends; ok is false when it stopped
// without a final answer.
func (r *replayer) sendIndependent(ctx context.Context, tenant int, path, key, body string) (answer, bool) {
	budget := r.c.Budget
	if budget == 0 {
		budget = r.c.Duration
	}
	deadline := time.Now().Add(budget)
	var last answer
	for n := 0; n < r.c.Attempts; n++ {
		if n > 0 {
			r.retries.Add(1)
		}
		a, hint, err := r.attempt(ctx, tenant, path, key, body)
		last.attempts = n + 1
		if err == nil {
			a.attempts = last.attempts
			if !retried(a.status, hint) {
				return a, true
			}
			last = a
		} else {
			last.err = err
		}
		if errors.Is(err, errRequestBudget) {
			break
		}
		wait := independentWait(n, hint)
		if time.Now().Add(wait).After(deadline) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			last.gaveUp = true
			r.gaveUp.Add(1)
			return last, false
		case <-t.C:
		}
	}
	last.gaveUp = true
	r.gaveUp.Add(1)
	return last, false
}

// attempt sends one attempt, under the key, cut off after a timeout of
// its own; hint is the answer's Retry-After (parseHint).
func (r *replayer) attempt(ctx context.Context, tenant int, path, key, body string) (a answer, hint time.Duration, err error) {
	actx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	a, h, err := r.postWith(actx, r.plain, tenant, path, body, key)
	return a, parseHint(h), err
}

// retried reports whether the Independent client retries an answer of
// status with Retry-After hint: 409 request-in-progress (which carries
// one), 429 and 5xx. A 409 without one (outcome-unknown) is final.
func retried(status int, hint time.Duration) bool {
	switch {
	case status == http.StatusConflict:
		return hint >= 0
	case status == http.StatusTooManyRequests, status >= 500:
		return true
	}
	return false
}

// independentWait is the wait before attempt n+1: a backoff of 25 ms
// doubling with n to a 1 s cap, drawn from its upper half; after an
// answer carrying Retry-After, the larger of that and the hint capped at
// 2 s. hint is -1 after a timeout, an error or an answer without one.
func independentWait(n int, hint time.Duration) time.Duration {
	b := min(independentBackoffBase<<min(n, 10), independentBackoffMax)
	wait := b/2 + rand.N(b/2+1)
	if hint >= 0 {
		wait = max(wait, min(hint, independentHintMax))
	}
	return wait
}

// parseHint reads a Retry-After in seconds; -1 when there is none or it
// is not a number of seconds.
func parseHint(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return -1
	}
	s, err := strconv.Atoi(v)
	if err != nil || s < 0 {
		return -1
	}
	return time.Duration(s) * time.Second
}
