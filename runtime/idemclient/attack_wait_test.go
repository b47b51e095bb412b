package idemclient

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"
)

// Retry-After values a server should not send are read safely: in the
// past, negative or garbage, the backoff alone decides, and it stays within
// its ceiling.
func TestAttackRetryAfterIgnored(t *testing.T) {
	for _, ra := range []string{"Sun, 01 Mar 2020 12:00:00 GMT", "-5", "soon", "1.5", "0x10"} {
		h := http.Header{"Retry-After": {ra}}
		s := &script{answers: []func(*http.Request) (*http.Response, error){answer(503, h, ""), answer(201, nil, "")}}
		tr, waits := newTest(t, s, Config{})
		res, _, _ := post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
		if res.StatusCode != 201 || len(*waits) != 1 || (*waits)[0] > DefaultBackoffBase {
			t.Errorf("Retry-After %q: status %d, waits %v; want a retry within the first backoff", ra, res.StatusCode, *waits)
		}
	}
}

// Retry-After is never cut short: a value beyond the budget, however it is
// spelled and however large, ends the retries at once, and of repeated
// headers the longest counts.
func TestAttackRetryAfterHostile(t *testing.T) {
	for name, ra := range map[string][]string{
		"two days":                 {"172800"},
		"beyond a Duration":        {"99999999999999999999"},
		"far-future date":          {"Fri, 31 Dec 9999 23:59:59 GMT"},
		"repeated, longest last":   {"1", "3600"},
		"repeated, garbage second": {"3600", "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			h := http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": ra}
			s := &script{answers: []func(*http.Request) (*http.Response, error){
				answer(409, h, `{"type":"https://idemgen.dev/problems/request-in-progress"}`),
				answer(201, nil, ""),
			}}
			tr, waits := newTest(t, s, Config{})
			res, rep, _ := post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
			if res.StatusCode != 409 || !rep.GaveUp || len(s.got) != 1 || len(*waits) != 0 {
				t.Errorf("Retry-After %q: status %d, report %+v, waits %v; want the 409 at once, given up", ra, res.StatusCode, rep, *waits)
			}
		})
	}
}

// A caller's extreme backoff settings cannot crash the Transport: the
// jitter's range cannot overflow.
func TestAttackBackoffExtremes(t *testing.T) {
	tr, err := New(Config{Operations: []Operation{transferOp()}, BackoffBase: math.MaxInt64, BackoffMax: math.MaxInt64, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < 70; n++ {
		if d := tr.backoff(n); d < 0 {
			t.Fatalf("backoff(%d) = %v", n, d)
		}
	}
}
