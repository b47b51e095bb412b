package idem_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var (
	secretOld = []byte("0123456789abcdef-old-secret")
	secretNew = []byte("fedcba9876543210-new-secret")
)

// spyStore records everything the engine hands to a store, and can change
// what a claim reads back, as a reader or writer of the database could.
type spyStore struct {
	idemstore.Store
	mu      sync.Mutex
	claims  []idemstore.Claim
	stored  []idemstore.Response
	ids     []idemstore.Identity
	onClaim func(idemstore.Result) idemstore.Result
}

func (s *spyStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	s.mu.Lock()
	s.claims = append(s.claims, c)
	s.mu.Unlock()
	res, err := s.Store.Claim(ctx, c)
	if err == nil && s.onClaim != nil {
		res = s.onClaim(res)
	}
	return res, err
}

func (s *spyStore) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	s.mu.Lock()
	s.stored = append(s.stored, resp)
	s.ids = append(s.ids, id)
	s.mu.Unlock()
	return s.Store.Complete(ctx, id, token, resp)
}

// secretServer is an engine over store with cfg's secrets and sealer, and
// a handler that echoes the request body (a memo with a card number in it)
// and counts its runs.
type secretServer struct {
	t    *testing.T
	h    http.Handler
	runs *atomic.Int64
	logs *bytes.Buffer
}

func newSecretServer(t *testing.T, store idemstore.Store, runs *atomic.Int64, cfg idem.Config) *secretServer {
	t.Helper()
	logs := new(bytes.Buffer)
	cfg.Store = store
	if cfg.Policies == nil {
		cfg.Policies = []idem.Policy{transferPolicy()}
	}
	cfg.Tenant = func(*http.Request) (string, bool) { return "acme", true }
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	e, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &secretServer{t: t, runs: runs, logs: logs, h: e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		if strings.Contains(b.String(), "panic") {
			panic("handler failed")
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Cost", "card 4111111111111111")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1","echo":` + b.String() + `}`))
	}))}
}

func (s *secretServer) post(key, body string) *httptest.ResponseRecorder {
	s.t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, r)
	return w
}

const (
	secretKey  = "order-4711-customer-0042"
	cardMemo   = "4111111111111111"
	secretBody = `{"amount": 1234, "to": "acc_2", "memo": "` + cardMemo + `"}`
)

// plainSum is the unkeyed fingerprint of transferPolicy's fields for an
// amount: what a reader of the store could compute for every guess.
func plainSum(t *testing.T, amount int) [32]byte {
	t.Helper()
	fp, err := fingerprint.Compile(transferPolicy().Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := fp.Sum(fingerprint.Input{MediaType: "application/json", Body: []byte(`{"amount":` + strconv.Itoa(amount) + `,"to":"acc_2"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// guessAmount tries every amount below 2500 against a stored fingerprint,
// as anyone reading the table could.
func guessAmount(t *testing.T, stored []byte) (int, bool) {
	for a := range 2500 {
		s := plainSum(t, a)
		if bytes.Equal(s[:], stored) {
			return a, true
		}
	}
	return 0, false
}

func TestWithoutSecretsTheStoreHoldsKeyAndGuessableFingerprint(t *testing.T) {
	// The state of affairs the secrets change: without them the key is
	// stored in clear and an amount falls out of the fingerprint.
	spy := &spyStore{Store: memstore.New()}
	s := newSecretServer(t, spy, new(atomic.Int64), idem.Config{})
	expect(t, s.post(secretKey, secretBody), http.StatusCreated, "")
	if got := spy.claims[0].Key; got != secretKey {
		t.Fatalf("stored key %q, want the key in clear", got)
	}
	if a, ok := guessAmount(t, spy.claims[0].Fingerprint); !ok || a != 1234 {
		t.Fatalf("amount not recovered from an unkeyed fingerprint (got %d, %v)", a, ok)
	}
}

func TestSecretsKeepKeyFingerprintAndBodyOutOfTheStoreAndLogs(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	sealer, err := idemstore.NewAESGCM(idemstore.SealKey{ID: "k1", Key: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	runs := new(atomic.Int64)
	s := newSecretServer(t, spy, runs, idem.Config{Secrets: [][]byte{secretNew}, Sealer: sealer})
	first := s.post(secretKey, secretBody)
	expect(t, first, http.StatusCreated, "")
	// A different request under the key (logged), and a panic under
	// another (logged at ERROR and WARN with the key's label).
	expect(t, s.post(secretKey, `{"amount": 1, "to": "acc_2"}`), http.StatusUnprocessableEntity, "idempotency-key-reused")
	expect(t, s.post(secretKey+"-2", `{"amount": 1, "to": "panic"}`), http.StatusInternalServerError, "handler-failed")
	replay := s.post(secretKey, secretBody)
	expect(t, replay, http.StatusCreated, "")
	if replay.Body.String() != first.Body.String() || replay.Header().Get("X-Request-Cost") != first.Header().Get("X-Request-Cost") {
		t.Fatalf("replay %q %v, want %q %v", replay.Body, replay.Header(), first.Body, first.Header())
	}
	if runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", runs.Load())
	}

	want := idemstore.StoredKey(secretNew, secretKey)
	for _, c := range spy.claims {
		if strings.Contains(c.Key, "order-4711") {
			t.Fatalf("the store was given the key %q", c.Key)
		}
	}
	if spy.claims[0].Key != want || !idemstore.IsStoredHMAC(want) {
		t.Fatalf("stored key %q, want %q", spy.claims[0].Key, want)
	}
	if a, ok := guessAmount(t, spy.claims[0].Fingerprint); ok {
		t.Fatalf("amount %d recovered from a keyed fingerprint", a)
	}
	for _, resp := range spy.stored {
		blob := append(append([]byte(nil), resp.Body...), []byte(strings.Join(resp.Header.Values("X-Request-Cost"), ""))...)
		if bytes.Contains(blob, []byte(cardMemo)) || bytes.Contains(blob, []byte("4111")) {
			t.Fatalf("the store was given the body or header in clear: %q", blob)
		}
		if len(resp.Header) != 0 {
			t.Fatalf("sealed response stores headers %v", resp.Header)
		}
	}
	logs := s.logs.String()
	if strings.Contains(logs, "order-4711") || !strings.Contains(logs, idemstore.KeyLabel(secretNew, secretKey+"-2")) {
		t.Fatalf("logs hold the key, or not its label:\n%s", logs)
	}
}

func TestStoredKeyIsHMACAndCarriesTheLabel(t *testing.T) {
	m := hmac.New(sha256.New, secretNew)
	m.Write([]byte(secretKey))
	want := "hmac " + hex.EncodeToString(m.Sum(nil))
	if got := idemstore.StoredKey(secretNew, secretKey); got != want {
		t.Fatalf("StoredKey = %q, want %q", got, want)
	}
	long := bytes.Repeat([]byte("s"), 100) // longer than a block: hashed first
	m = hmac.New(sha256.New, long)
	m.Write([]byte(strings.Repeat("k", 300)))
	if got := idemstore.StoredKey(long, strings.Repeat("k", 300)); got != "hmac "+hex.EncodeToString(m.Sum(nil)) {
		t.Fatalf("StoredKey with a long secret and key = %q", got)
	}
	if got := idemstore.StoredKeyLabel(nil, want); got != idemstore.KeyLabel(secretNew, secretKey) {
		t.Fatalf("label %q, want %q", got, idemstore.KeyLabel(secretNew, secretKey))
	}
	if got := idemstore.StoredKey(nil, secretKey); got != secretKey {
		t.Fatalf("StoredKey without a secret = %q", got)
	}
}

func TestSecretsConfigRefused(t *testing.T) {
	for name, cfg := range map[string]idem.Config{
		"short":          {Secrets: [][]byte{[]byte("short")}},
		"empty newest":   {Secrets: [][]byte{nil, secretNew}},
		"log keys":       {Secrets: [][]byte{secretNew}, LogKeys: true},
		"label differs":  {Secrets: [][]byte{secretNew}, KeyLabelSecret: secretOld},
		"two clear rows": {Secrets: [][]byte{secretNew, nil, nil}},
	} {
		cfg.Store = memstore.New()
		cfg.Tenant = func(*http.Request) (string, bool) { return "acme", true }
		if _, err := idem.New(cfg); err == nil {
			t.Errorf("%s: idem.New accepted %+v", name, cfg.Secrets)
		}
	}
}

func TestRotationReplaysRowsWrittenUnderAnOlderSecret(t *testing.T) {
	store := memstore.New()
	runs := new(atomic.Int64)
	before := newSecretServer(t, store, runs, idem.Config{Secrets: [][]byte{secretOld}})
	first := before.post(secretKey, secretBody)
	expect(t, first, http.StatusCreated, "")

	spy := &spyStore{Store: store}
	after := newSecretServer(t, spy, runs, idem.Config{Secrets: [][]byte{secretNew, secretOld}, SecretsRotatedAt: time.Now(), EffectSecret: secretOld})
	replay := after.post(secretKey, secretBody)
	expect(t, replay, http.StatusCreated, "")
	if replay.Body.String() != first.Body.String() || replay.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after rotation: %d %q, want the replay of %q", replay.Code, replay.Body, first.Body)
	}
	expect(t, after.post(secretKey, `{"amount": 1, "to": "acc_2"}`), http.StatusUnprocessableEntity, "idempotency-key-reused")
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
	// A new key runs once, under the new secret, and replays from there.
	expect(t, after.post("fresh", secretBody), http.StatusCreated, "")
	expect(t, after.post("fresh", secretBody), http.StatusCreated, "")
	if runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", runs.Load())
	}
	// The claim under the older secret found nothing and was released:
	// a replica still on the old secret runs a new key normally.
	if got := spy.claims[len(spy.claims)-1].Key; got != idemstore.StoredKey(secretNew, "fresh") {
		t.Fatalf("a replay under the newest secret claimed %q; want one claim only", got)
	}
	expect(t, before.post("fresh", secretBody), http.StatusCreated, "")

	// Past the window, rows under the older secret are no longer looked
	// for: the row is not found (this is why the window is ttl + lease).
	late := newSecretServer(t, store, runs, idem.Config{Secrets: [][]byte{secretNew, secretOld}, SecretsRotatedAt: time.Now().Add(-48 * time.Hour), EffectSecret: secretOld})
	n := runs.Load()
	expect(t, late.post(secretKey, secretBody), http.StatusCreated, "")
	if runs.Load() != n+1 {
		t.Fatal("past the rotation window the older secret was still consulted")
	}
}

func TestSecretsUpgradeFromClearRows(t *testing.T) {
	store := memstore.New()
	runs := new(atomic.Int64)
	clear := newSecretServer(t, store, runs, idem.Config{})
	first := clear.post(secretKey, secretBody)
	expect(t, first, http.StatusCreated, "")
	// An empty entry stands for the rows written before secrets.
	upgraded := newSecretServer(t, store, runs, idem.Config{Secrets: [][]byte{secretNew, nil}, UnkeyedEffectKeys: true})
	replay := upgraded.post(secretKey, secretBody)
	expect(t, replay, http.StatusCreated, "")
	if runs.Load() != 1 || replay.Body.String() != first.Body.String() {
		t.Fatalf("handler ran %d times; replay %q", runs.Load(), replay.Body)
	}
}

func TestRotationMixedReplicasRunOnce(t *testing.T) {
	// During a rolling deploy one replica writes under the old secret and
	// reads the new, another the reverse. Concurrent requests with one
	// key run the handler once whichever replica they reach.
	store := memstore.New()
	runs := new(atomic.Int64)
	a := newSecretServer(t, store, runs, idem.Config{Secrets: [][]byte{secretOld, secretNew}, EffectSecret: secretOld})
	b := newSecretServer(t, store, runs, idem.Config{Secrets: [][]byte{secretNew, secretOld}, EffectSecret: secretOld})
	for k := range 50 {
		key := "mixed-" + strconv.Itoa(k)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				s := a
				if i%2 == 1 {
					s = b
				}
				for {
					w := s.post(key, secretBody)
					if w.Code != http.StatusConflict {
						if w.Code != http.StatusCreated {
							t.Errorf("key %s: %d %s", key, w.Code, w.Body)
						}
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
	}
	if runs.Load() != 50 {
		t.Fatalf("handler ran %d times for 50 keys", runs.Load())
	}
}

func TestSealedResponseRotationAndTampering(t *testing.T) {
	k1 := idemstore.SealKey{ID: "2026-01", Key: bytes.Repeat([]byte{1}, 32)}
	k2 := idemstore.SealKey{ID: "2026-07", Key: bytes.Repeat([]byte{2}, 32)}
	s1, err := idemstore.NewAESGCM(k1)
	if err != nil {
		t.Fatal(err)
	}
	s21, err := idemstore.NewAESGCM(k2, k1)
	if err != nil {
		t.Fatal(err)
	}
	spy := &spyStore{Store: memstore.New()}
	runs := new(atomic.Int64)
	old := newSecretServer(t, spy, runs, idem.Config{Secrets: [][]byte{secretNew}, Sealer: s1})
	first := old.post(secretKey, secretBody)
	expect(t, first, http.StatusCreated, "")
	expect(t, old.post("other", secretBody), http.StatusCreated, "")

	// Sealed under the old key id, opened after the rotation.
	rotated := newSecretServer(t, spy, runs, idem.Config{Secrets: [][]byte{secretNew}, Sealer: s21})
	if w := rotated.post(secretKey, secretBody); w.Body.String() != first.Body.String() {
		t.Fatalf("after the seal key's rotation: %d %q", w.Code, w.Body)
	}
	if !bytes.Contains(spy.stored[0].Body, []byte(k1.ID)) {
		t.Fatal("the seal's key id is not in the row")
	}

	// A replica without the sealer, or with only the new key, replays nothing.
	bare := newSecretServer(t, spy, runs, idem.Config{Secrets: [][]byte{secretNew}})
	expect(t, bare.post(secretKey, secretBody), http.StatusInternalServerError, "stored-response-unreadable")
	s2, err := idemstore.NewAESGCM(k2)
	if err != nil {
		t.Fatal(err)
	}
	newOnly := newSecretServer(t, spy, runs, idem.Config{Secrets: [][]byte{secretNew}, Sealer: s2})
	expect(t, newOnly.post(secretKey, secretBody), http.StatusInternalServerError, "stored-response-unreadable")

	// One flipped byte of the sealed body, a changed status, or the sealed
	// response of another key's row: refused, never replayed.
	otherRow := spy.stored[1]
	for name, change := range map[string]func(*idemstore.Response){
		"flipped byte": func(r *idemstore.Response) { r.Body[len(r.Body)-3] ^= 1 },
		"status":       func(r *idemstore.Response) { r.Status = http.StatusOK },
		"moved":        func(r *idemstore.Response) { *r = otherRow },
		"unsealed":     func(r *idemstore.Response) { r.Body = []byte(`{"id":"forged"}`) },
	} {
		spy.onClaim = func(res idemstore.Result) idemstore.Result {
			if res.Existing.Response != nil {
				r := *res.Existing.Response
				r.Body = append([]byte(nil), r.Body...)
				change(&r)
				res.Existing.Response = &r
			}
			return res
		}
		w := rotated.post(secretKey, secretBody)
		expect(t, w, http.StatusInternalServerError, "stored-response-unreadable")
		if strings.Contains(w.Body.String(), "tr_1") || strings.Contains(w.Body.String(), "forged") {
			t.Fatalf("%s: replayed %q", name, w.Body)
		}
	}
	spy.onClaim = nil
	if runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", runs.Load())
	}
}

func TestSealingTurnedOnAcceptsUnsealedRowsOnlyWhenAsked(t *testing.T) {
	store := memstore.New()
	runs := new(atomic.Int64)
	plain := newSecretServer(t, store, runs, idem.Config{})
	first := plain.post(secretKey, secretBody)
	k := idemstore.SealKey{ID: "k", Key: bytes.Repeat([]byte{3}, 32)}
	strict, _ := idemstore.NewAESGCM(k)
	lenient, _ := idemstore.NewAESGCM(k, idemstore.SealKey{})
	expect(t, newSecretServer(t, store, runs, idem.Config{Sealer: strict}).post(secretKey, secretBody), http.StatusInternalServerError, "stored-response-unreadable")
	if w := newSecretServer(t, store, runs, idem.Config{Sealer: lenient}).post(secretKey, secretBody); w.Body.String() != first.Body.String() {
		t.Fatalf("unsealed row with an empty SealKey: %d %q", w.Code, w.Body)
	}
}

func TestSecretsCostOneAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; allocation counts are measured without it")
	}
	// The keyed fingerprint is computed in place and the HMACs on the
	// stack; the stored key is the one new string.
	allocs := func(cfg idem.Config) float64 {
		s := newSecretServer(t, memstore.New(), new(atomic.Int64), cfg)
		n := 0
		return testing.AllocsPerRun(200, func() {
			n++
			r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(secretBody))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "k"+strconv.Itoa(n))
			s.h.ServeHTTP(httptest.NewRecorder(), r)
		})
	}
	plain, keyed := allocs(idem.Config{}), allocs(idem.Config{Secrets: [][]byte{secretNew}})
	if keyed > plain+1 {
		t.Fatalf("a new key allocates %.0f times with a secret, %.0f without; want at most one more", keyed, plain)
	}
}

// StoredFingerprint is HMAC-SHA256 of its domain and the canonical sum,
// exactly as crypto/hmac computes it, for secrets shorter and longer than a
// block; StoredKey agrees with crypto/hmac on both sides of the inline
// message limit.
func TestStoredFingerprintAndKeyAgreeWithCryptoHMAC(t *testing.T) {
	sum := sha256.Sum256([]byte(`{"amount":100}`))
	for _, secret := range [][]byte{[]byte("s"), bytes.Repeat([]byte("x"), 64), bytes.Repeat([]byte("y"), 65), bytes.Repeat([]byte("z"), 200)} {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte("\x00idemgen fingerprint\x00")) // the stored format: pinned
		m.Write(sum[:])
		if got := idemstore.StoredFingerprint(secret, sum); !bytes.Equal(got[:], m.Sum(nil)) {
			t.Errorf("StoredFingerprint with a %d-byte secret differs from crypto/hmac", len(secret))
		}
		for _, n := range []int{0, 1, 255, 256, 257, 1000} {
			key := strings.Repeat("k", n)
			m := hmac.New(sha256.New, secret)
			m.Write([]byte(key))
			if got := idemstore.StoredKey(secret, key); got != "hmac "+hex.EncodeToString(m.Sum(nil)) {
				t.Errorf("StoredKey of a %d-byte key under a %d-byte secret differs from crypto/hmac", n, len(secret))
			}
		}
	}
}

// Every secret the engine takes meets one length rule: the label secret is
// refused at the length a store secret is refused at, and accepted at the
// length a store secret is accepted at.
func TestSecretLengthRuleIsTheSameForLabelsAndStore(t *testing.T) {
	for n := 1; n <= 32; n++ {
		secret := bytes.Repeat([]byte("s"), n)
		_, labelErr := idem.New(idem.Config{Store: memstore.New(), Tenant: func(*http.Request) (string, bool) { return "acme", true },
			KeyLabelSecret: secret})
		_, storeErr := idem.New(idem.Config{Store: memstore.New(), Tenant: func(*http.Request) (string, bool) { return "acme", true },
			Secrets: [][]byte{secret}})
		if (labelErr == nil) != (storeErr == nil) {
			t.Errorf("a %d-byte secret: as KeyLabelSecret %v, as Secrets[0] %v; want one answer", n, labelErr, storeErr)
		}
		if n < 16 && labelErr == nil {
			t.Errorf("a %d-byte KeyLabelSecret was accepted", n)
		}
	}
}
