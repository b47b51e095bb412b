package processor

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func post(t *testing.T, h http.Handler, path, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func chargeID(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var c Charge
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil || c.ID == "" {
		t.Fatalf("%d %s: not a charge", rec.Code, rec.Body)
	}
	return c.ID
}

// TestKeys: a key charges once, across a restart; no key charges every
// time; receipts are all kept, whatever their keys; a line a kill cut off
// is dropped.
func TestKeys(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := p.Handler()
	const body = `{"amount":500,"currency":"EUR","description":"t-1"}`
	first := post(t, h, "/v1/charges", "k1", body)
	again := post(t, h, "/v1/charges", "k1", body)
	if first.Code != http.StatusCreated || again.Code != http.StatusOK || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("statuses %d, %d (replayed %q), want 201, 200 replayed", first.Code, again.Code, again.Header().Get("Idempotent-Replayed"))
	}
	if a, b := chargeID(t, first), chargeID(t, again); a != b {
		t.Fatalf("the same key charged twice: %s, %s", a, b)
	}
	if a, b := chargeID(t, post(t, h, "/v1/charges", "", body)), chargeID(t, post(t, h, "/v1/charges", "", body)); a == b {
		t.Fatalf("two keyless charges share id %s", a)
	}
	for range 2 {
		if rec := post(t, h, "/v1/receipts", "k1", `{"transfer_id":"tr_1"}`); rec.Code != http.StatusNoContent {
			t.Fatalf("receipt: %d %s", rec.Code, rec.Body)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// A write cut off by a kill.
	f, err := os.OpenFile(filepath.Join(dir, ChargesFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"id":"ch_torn","idempotency_key":"k2"`)
	_ = f.Close()

	p, err = Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h = p.Handler()
	if got := chargeID(t, post(t, h, "/v1/charges", "k1", body)); got != chargeID(t, first) {
		t.Errorf("after a restart key k1 charged %s, want the first charge %s", got, chargeID(t, first))
	}
	if got := chargeID(t, post(t, h, "/v1/charges", "k2", body)); got == "ch_torn" {
		t.Errorf("a torn line's charge was kept")
	}
	if len(p.charges) != 4 || len(p.receipts) != 2 {
		t.Errorf("%d charges and %d receipts kept, want 4 and 2", len(p.charges), len(p.receipts))
	}
}
