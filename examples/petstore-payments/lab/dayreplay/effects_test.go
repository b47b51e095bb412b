package dayreplay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/processor"
)

// TestAuditEffects: the audit counts a second charge for one memo, a
// receipt for a transfer it was not given, a transfer without a receipt,
// and a duplicate receipt, with or without the first's key.
func TestAuditEffects(t *testing.T) {
	p, err := processor.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	send := func(path, key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
	}
	send("/v1/charges", "a", `{"amount":1,"currency":"EUR","description":"day-tr-1"}`)
	send("/v1/charges", "a", `{"amount":1,"currency":"EUR","description":"day-tr-1"}`) // the same key: one charge
	send("/v1/charges", "b", `{"amount":1,"currency":"EUR","description":"day-tr-1"}`) // another key: a duplicate
	send("/v1/charges", "c", `{"amount":1,"currency":"EUR","description":"day-tr-9"}`) // never committed
	send("/v1/receipts", "r1", `{"transfer_id":"tr_1"}`)
	send("/v1/receipts", "r1", `{"transfer_id":"tr_1"}`)    // a duplicate with the first's key
	send("/v1/receipts", "other", `{"transfer_id":"tr_1"}`) // and one without
	send("/v1/receipts", "r9", `{"transfer_id":"tr_9"}`)    // of a transfer that did not commit

	transfers := map[string]apiTransfer{
		"tr_1": {ID: "tr_1", Memo: "day-tr-1"},
		"tr_2": {ID: "tr_2", Memo: "day-tr-2"}, // no receipt
	}
	e, err := auditEffects(context.Background(), srv.URL, transfers, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := Effects{Charges: 3, DuplicateCharges: 1, ChargedNotCommitted: 1, Receipts: 4,
		ReceiptsNotCommitted: 1, Undelivered: 1, DuplicateReceipts: 2, DuplicateSameKey: 1}
	e.Wait = 0
	if *e != want {
		t.Errorf("audit %+v, want %+v", *e, want)
	}
}
