package enginetest

import (
	"bytes"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	fp "github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// Secrets checks, on a real store, that with Config.Secrets and a Sealer
// the store holds no second copy of customers' data: Instance.Dump returns
// every byte the store keeps (the table's rows, Redis's keys and values), and
// neither the key, nor a response's body or header, nor the unkeyed
// fingerprint of the request may appear in it, in the logs either. It
// then rotates both the secret and the seal key and checks that the rows
// written before still replay, and that a new key runs once. A store that
// is an idemstore.Transactor is checked with a transactional operation too.
func Secrets(t *testing.T, target storetest.Target) {
	t.Helper()
	in := target.Open(t, nil)
	store, dump := in.Store, in.Dump
	if dump == nil {
		t.Fatal("enginetest: Secrets needs the target's Dump")
	}
	const (
		key  = "order-4711-customer-0042"
		card = "4111111111111111"
		body = `{"amount": 1234, "to": "acc_2", "memo": "card ` + card + `"}`
	)
	old, now := []byte("storetest-old-secret-0123456789"), []byte("storetest-new-secret-9876543210")
	k1 := idemstore.SealKey{ID: "seal-1", Key: bytes.Repeat([]byte{0x11}, 32)}
	k2 := idemstore.SealKey{ID: "seal-2", Key: bytes.Repeat([]byte{0x22}, 32)}

	policies := []idem.Policy{EnginePolicy("secretPlain", "/secret-plain", time.Minute, idemstore.FailClosed, false)}
	_, isTx := store.(idemstore.Transactor)
	if isTx {
		policies = append(policies, EnginePolicy("secretTx", "/secret-tx", time.Minute, idemstore.Takeover, true))
	}
	for i := range policies {
		policies[i].ReplayHeaders = []string{"X-Request-Cost"}
		policies[i].Fingerprint = fp.Spec{Body: []fp.Field{
			{Pointer: "/amount", Type: fp.Integer}, {Pointer: "/to", Type: fp.String}}}
	}
	var runs atomic.Int64
	logs := new(bytes.Buffer)
	serve := func(secrets [][]byte, keys ...idemstore.SealKey) http.Handler {
		t.Helper()
		sealer, err := idemstore.NewAESGCM(keys...)
		if err != nil {
			t.Fatal(err)
		}
		e, err := idem.New(idem.Config{
			Store: store, Policies: policies, Secrets: secrets, Sealer: sealer,
			EffectSecret: old, // the secret listed alone before the rotation
			Tenant:       func(*http.Request) (string, bool) { return "acme", true },
			Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		if err != nil {
			t.Fatal(err)
		}
		return e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			_, _ = idem.TxFrom[any](r.Context()) // the transactional operation writes nothing but takes its transaction
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Request-Cost", card)
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"tr_1","echo":` + string(b) + `}`))
		}))
	}
	post := func(h http.Handler, path, k string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", k)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	compiled, err := fp.Compile(policies[0].Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := compiled.Sum(fp.Input{MediaType: "application/json", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	clean := func(when string) {
		t.Helper()
		held := dump(t)
		for what, needle := range map[string][]byte{
			"the key": []byte(key), "the card number": []byte(card), "the unkeyed fingerprint": plain[:],
			"the unkeyed fingerprint in hex": []byte(hex.EncodeToString(plain[:])),
		} {
			if bytes.Contains(held, needle) || bytes.Contains(held, []byte(hex.EncodeToString(needle))) {
				t.Errorf("%s: the store holds %s", when, what)
			}
		}
		if len(held) == 0 {
			t.Errorf("%s: the dump is empty; it must show what the store holds", when)
		}
		if strings.Contains(logs.String(), key) || strings.Contains(logs.String(), card) {
			t.Errorf("%s: the logs hold the key or the card number:\n%s", when, logs)
		}
	}

	before := serve([][]byte{old}, k1)
	first := map[string]string{}
	for _, p := range policies {
		w := post(before, p.Path, key)
		if w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), card) {
			t.Fatalf("%s: first request: %d %s", p.OperationID, w.Code, w.Body)
		}
		first[p.Path] = w.Body.String()
	}
	clean("written under the first secret")

	after := serve([][]byte{now, old}, k2, k1)
	for _, p := range policies {
		w := post(after, p.Path, key)
		if w.Code != http.StatusCreated || w.Body.String() != first[p.Path] || w.Header().Get(problem.ReplayedHeader) != "true" {
			t.Errorf("%s: after rotation: %d %s, want the replay of %s", p.OperationID, w.Code, w.Body, first[p.Path])
		}
		if got := w.Header().Get("X-Request-Cost"); got != card {
			t.Errorf("%s: replayed header %q, want %q", p.OperationID, got, card)
		}
		for i := range 2 {
			w := post(after, p.Path, "fresh-"+key)
			if w.Code != http.StatusCreated || (i == 1) != (w.Header().Get(problem.ReplayedHeader) == "true") {
				t.Errorf("%s: a new key after rotation, request %d: %d %s", p.OperationID, i+1, w.Code, w.Body)
			}
		}
	}
	if got, want := runs.Load(), int64(2*len(policies)); got != want {
		t.Errorf("handlers ran %d times, want %d", got, want)
	}
	clean("after rotation")
}
