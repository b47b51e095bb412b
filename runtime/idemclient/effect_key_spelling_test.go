package idemclient

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// docs/client.md: "A request that carries its own key or header keeps it"
// under WithEffectKey. A caller that wrote its own Idempotency-Key header
// straight into the header map in another spelling (as the Transport
// accepts for an operation of the table) keeps it only in name: the
// Transport does not see it and adds the effect key beside it, so the
// downstream receives two Idempotency-Key values, which a server reads as
// one repeated header (refused, or the first taken).
func TestOwnIdempotencyKeyHeaderInAnotherSpellingWins(t *testing.T) {
	var got http.Header
	s := &script{answers: []func(*http.Request) (*http.Response, error){func(r *http.Request) (*http.Response, error) {
		got = r.Header.Clone()
		return answer(201, nil, `{}`)(r)
	}}}
	tr, _ := newTest(t, s, Config{})
	req, _ := http.NewRequestWithContext(WithEffectKey(context.Background(), "effect"), http.MethodPost, "http://processor.test/v1/charges", strings.NewReader(`{}`))
	req.Header["idempotency-key"] = []string{"own"}
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	var vs []string
	for k, v := range got {
		if strings.EqualFold(k, EffectKeyHeader) {
			vs = append(vs, v...)
		}
	}
	if len(vs) != 1 || vs[0] != "own" {
		t.Fatalf("the downstream received Idempotency-Key values %q; want only the request's own \"own\"", vs)
	}
}
