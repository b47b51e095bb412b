package idem_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// decodingHandler stands in for a strict server: it decodes the body into
// its types, and a body that does not fit (a memo that is not a string) is
// refused with 400 before anything runs, after telling the engine so.
// Every other body reaches write, whose status is the answer.
func decodingHandler(t *testing.T, write func(ctx context.Context, memo string) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Amount int    `json:"amount"`
			Memo   string `json:"memo"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			if !idem.NotExecuted(r.Context()) {
				t.Error("NotExecuted: the engine did not hear it")
			}
			http.Error(w, "can't decode JSON body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(write(r.Context(), in.Memo))
	})
}

func postBody(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

const (
	badMemo  = `{"amount": 1000, "to": "acc_2", "memo": 7}`
	goodMemo = `{"amount": 1000, "to": "acc_2", "memo": "rent"}`
)

// A request refused as not executed is answered as the handler answered
// it, and its key is free: the same request runs again, and the corrected
// one with the same key runs and is stored. A business 4xx is stored and
// replayed like any answer.
func TestNotExecutedIsNeverStored(t *testing.T) {
	f := newFixture(t, transferPolicy())
	ran := 0
	f.server = f.engine.Middleware(decodingHandler(t, func(_ context.Context, memo string) int {
		ran++
		if memo == "declined" {
			return http.StatusUnprocessableEntity
		}
		return http.StatusCreated
	}))
	for range 2 {
		w := postBody(f.server, "k1", badMemo)
		if w.Code != http.StatusBadRequest || w.Header().Get("Idempotent-Replayed") != "" || !strings.Contains(w.Body.String(), "decode") {
			t.Fatalf("undecodable body: %d replayed=%q %q; want the handler's own 400, unstored", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
		}
	}
	if w := postBody(f.server, "k1", goodMemo); w.Code != http.StatusCreated || ran != 1 {
		t.Fatalf("corrected retry with the same key: %d, handler ran %d times; want 201 from one run", w.Code, ran)
	}
	if w := postBody(f.server, "k1", goodMemo); w.Header().Get("Idempotent-Replayed") != "true" || ran != 1 {
		t.Fatalf("retry of the corrected request: %d replayed=%q, %d runs; want a replay", w.Code, w.Header().Get("Idempotent-Replayed"), ran)
	}
	declined := `{"amount": 1000, "to": "acc_2", "memo": "declined"}`
	postBody(f.server, "k2", declined)
	if w := postBody(f.server, "k2", declined); w.Code != http.StatusUnprocessableEntity || w.Header().Get("Idempotent-Replayed") != "true" || ran != 2 {
		t.Fatalf("business 422 retried: %d replayed=%q, %d runs; want the stored 422 replayed", w.Code, w.Header().Get("Idempotent-Replayed"), ran)
	}
}

// The mark counts only with a 4xx: a success the handler calls "not
// executed" is still the key's answer.
func TestNotExecutedWithASuccessIsStored(t *testing.T) {
	f := newFixture(t, transferPolicy())
	f.server = f.engine.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.runs.Add(1)
		idem.NotExecuted(r.Context())
		w.WriteHeader(http.StatusCreated)
	}))
	postBody(f.server, "k", goodMemo)
	if w := postBody(f.server, "k", goodMemo); w.Header().Get("Idempotent-Replayed") != "true" || f.runs.Load() != 1 {
		t.Fatalf("retry: %d replayed=%q, %d runs; want the stored 201", w.Code, w.Header().Get("Idempotent-Replayed"), f.runs.Load())
	}
}

// Outside the engine nobody hears the mark.
func TestNotExecutedWithoutTheEngine(t *testing.T) {
	if idem.NotExecuted(context.Background()) {
		t.Fatal("NotExecuted reported an engine that is not there")
	}
}

// In transactional mode a request refused as not executed rolls its
// transaction back with the claim: what the handler wrote is gone and the
// corrected retry with the same key runs and commits once. A business 4xx
// commits with its key and is replayed.
func TestNotExecutedRollsTheTransactionBack(t *testing.T) {
	eng, db := sqliteTxEngine(t)
	write := func(ctx context.Context, memo string) int {
		tx, err := idem.TxFor[*sqlitestore.Tx](ctx, "createTransfer")
		if err != nil {
			return http.StatusInternalServerError
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO transfers (amount) VALUES (1)`); err != nil {
			return http.StatusInternalServerError
		}
		switch memo {
		case "declined":
			return http.StatusUnprocessableEntity
		case "late":
			// Written, then refused as not executed: the write must go.
			idem.NotExecuted(ctx)
			return http.StatusBadRequest
		}
		return http.StatusCreated
	}
	h := eng.Middleware(decodingHandler(t, write))
	late := `{"amount": 1000, "to": "acc_2", "memo": "late"}`
	if w := postBody(h, "k1", late); w.Code != http.StatusBadRequest {
		t.Fatalf("refused request: %d %s", w.Code, w.Body)
	}
	if n := countTransfers(t, db); n != 0 {
		t.Fatalf("%d transfers stand after a request refused as not executed, want 0", n)
	}
	if w := postBody(h, "k1", badMemo); w.Code != http.StatusBadRequest || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("undecodable body: %d replayed=%q", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if w := postBody(h, "k1", goodMemo); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("corrected retry with the same key: %d replayed=%q; want a fresh 201", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	declined := `{"amount": 1000, "to": "acc_2", "memo": "declined"}`
	postBody(h, "k2", declined)
	if w := postBody(h, "k2", declined); w.Code != http.StatusUnprocessableEntity || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("business 422 retried: %d replayed=%q; want the stored 422", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if n := countTransfers(t, db); n != 2 {
		t.Fatalf("%d transfers, want 2 (the corrected request and the declined one, each once)", n)
	}
}

// In durable mode the handler writes around its transaction, and those
// writes cannot be rolled back: a request it calls not executed keeps its
// key and its 4xx is stored, so a retry cannot repeat writes that stand.
func TestNotExecutedInDurableModeIsStored(t *testing.T) {
	le := newLooseEngine(t)
	le.flag(t)
	if w := le.post(t, "d", "unexecuted"); w.Code != http.StatusBadRequest {
		t.Fatalf("status %d, body %s", w.Code, w.Body)
	}
	if w := le.post(t, "d", "unexecuted"); w.Code != http.StatusBadRequest || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d replayed=%q; want the stored 400", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
}
