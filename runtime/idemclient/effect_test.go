package idemclient

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func TestEffectKeyTravelsToAnyDownstream(t *testing.T) {
	const ek = "0123456789abcdef0123456789abcdef01234567"
	ctx := WithEffectKey(WithKey(context.Background(), "a-plain-key"), ek)
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		answer(201, nil, `{}`), // a processor outside the table: sent once
		answer(201, nil, `{}`), // an operation of the table: its key
		answer(200, nil, `{}`), // a PUT outside the table
	}}
	tr, _ := newTest(t, s, Config{})
	if _, rep, err := post(t, tr, ctx, "http://processor.test/v1/charges", `{"amount":5}`); err != nil || rep.Attempts != 1 {
		t.Fatalf("processor call: %v, %d attempts", err, rep.Attempts)
	}
	if _, rep, err := post(t, tr, ctx, "http://api.test/transfers", `{"amount":5}`); err != nil || rep.Key != ek {
		t.Fatalf("table call: %v, key %q, want the effect key", err, rep.Key)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://processor.test/v1/customers/c1", strings.NewReader(`{}`))
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	for i, g := range s.got {
		if g.key != ek {
			t.Errorf("attempt %d (%s %s) carried Idempotency-Key %q, want the effect key", i, g.method, g.path, g.key)
		}
	}
	if req.Header.Get(EffectKeyHeader) != "" {
		t.Error("the caller's request was changed")
	}
}

func TestOwnIdempotencyKeyHeaderWins(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){answer(201, nil, `{}`)}}
	tr, _ := newTest(t, s, Config{})
	req, _ := http.NewRequestWithContext(WithEffectKey(context.Background(), "effect"), http.MethodPost, "http://processor.test/v1/charges", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "own")
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if s.got[0].key != "own" {
		t.Fatalf("Idempotency-Key %q, want the request's own", s.got[0].key)
	}
}
