package idemclient

import (
	"context"
	"net/http"
	"testing"
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
