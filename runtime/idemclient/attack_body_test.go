package idemclient

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A body whose GetBody returns other bytes cannot make a retry send them:
// every attempt sends the bytes the first one read.
func TestAttackGetBodyDiffers(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){fail(errors.New("reset")), answer(201, nil, "")}}
	tr, _ := newTest(t, s, Config{})
	req, _ := http.NewRequest(http.MethodPost, "http://api.test/transfers", strings.NewReader(`{"amount":5}`))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(`{"amount":500}`)), nil }
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if len(s.got) != 2 || s.got[1].body != `{"amount":5}` || s.got[0].key != s.got[1].key {
		t.Errorf("attempts %+v; want the first body twice under one key", s.got)
	}
}
