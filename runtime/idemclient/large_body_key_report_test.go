package idemclient

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/key"
)

// docs/client.md: "Replayed is reported for an answer to a request sent
// with a key", and Report.Key is "the idempotency key the call was made
// with". A body larger than MaxBodyBytes is streamed once; when the
// operation's key is a body member the caller wrote, the request is sent
// with that key all the same, yet the report names no key and calls the
// server's replay of an earlier call an answer of its own: a caller that
// checks rep.Replayed believes its operation ran now.
func TestLargeBodyWithOwnBodyKeyReportsItsKeyAndReplay(t *testing.T) {
	op := Operation{ID: "b", Method: "POST", Path: "/b", Key: Key{In: key.InBody, Name: "/idempotency_key"}, TTL: time.Hour}
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		answer(http.StatusCreated, http.Header{"Idempotent-Replayed": {"true"}}, `{}`),
	}}
	tr, _ := newTest(t, s, Config{Operations: []Operation{op}, MaxBodyBytes: 64})
	body := `{"idempotency_key":"k-caller-1","note":"` + strings.Repeat("x", 200) + `"}`
	_, rep, err := post(t, tr, context.Background(), "http://api.test/b", body)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Key != "k-caller-1" || !rep.Replayed {
		t.Fatalf("report of a large body sent with its own body key: Key %q Replayed %v; want Key %q and Replayed true", rep.Key, rep.Replayed, "k-caller-1")
	}
}
