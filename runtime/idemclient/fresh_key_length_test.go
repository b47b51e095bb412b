package idemclient

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/key"
)

// docs/client.md: a request that carries no key gets "a fresh random key";
// docs/extension.md lets a policy's keyMaxLength be anything from 1 to 255,
// taken from the maxLength the spec declares for the key. The fresh key is
// always 26 characters: under a policy whose keys are at most 20 long, New
// accepts the table and every call the Transport keys itself is sent with
// a key the server refuses with 400 invalid-idempotency-key.
func TestFreshKeyFitsKeyMaxLength(t *testing.T) {
	op := transferOp()
	op.KeyMaxLength = 20
	s := &script{answers: []func(*http.Request) (*http.Response, error){answer(201, nil, `{}`)}}
	tr, err := New(Config{Operations: []Operation{op}, Base: s})
	if err != nil {
		return // refusing the table up front keeps the promise too
	}
	res, _, err := post(t, tr, context.Background(), "http://api.test/transfers", `{"amount":5}`)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if len(s.got) == 0 {
		t.Fatal("nothing was sent")
	}
	if err := key.Check(s.got[0].key, op.KeyMaxLength); err != nil {
		t.Fatalf("the Transport's own key %q (%d characters) is one the server refuses under keyMaxLength %d: %v", s.got[0].key, len(s.got[0].key), op.KeyMaxLength, err)
	}
}

// An operation whose keys are too short for a key the Transport draws
// (under 16 characters, 80 random bits) is refused by New with an error
// that names it.
func TestKeyMaxLengthTooShortForFreshKeyRefused(t *testing.T) {
	op := transferOp()
	op.KeyMaxLength = 15
	_, err := New(Config{Operations: []Operation{op}, Base: &script{}})
	if err == nil || !strings.Contains(err.Error(), op.ID) {
		t.Fatalf("New with keyMaxLength 15: %v; want a refusal naming the operation", err)
	}
}
