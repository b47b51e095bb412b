package dayreplay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/processor"
)

// Effects is the audit of what the day's transfers did outside the
// database, as the processor recorded it: the charges it made and the
// receipts it received.
type Effects struct {
	// Charges counts the charges the processor made.
	Charges int
	// DuplicateCharges counts the charges beyond the first for one
	// logical transfer, found by the memo the service sends as the
	// charge's description (the memo is the transfer's key in the day).
	DuplicateCharges int
	// ChargedNotCommitted counts the logical transfers charged that no
	// committed transfer stands for: a request that charged and was
	// never committed, which only a client that gave up can leave.
	ChargedNotCommitted int
	// Receipts counts the receipts received, duplicates included.
	Receipts int
	// ReceiptsNotCommitted counts the receipts of a transfer that does
	// not exist: sent for a run whose transaction rolled back.
	ReceiptsNotCommitted int
	// Undelivered counts the committed transfers without a receipt once
	// the wait for them ended.
	Undelivered int
	// DuplicateReceipts counts the receipts beyond the first for one
	// transfer, and DuplicateSameKey those of them that carried the
	// first's Idempotency-Key, which a receiver that keeps keys turns away.
	DuplicateReceipts, DuplicateSameKey int
	// Unrecorded counts the deliveries the server's runner made and could
	// not record, as its log says (unrecordedDelivery): each is delivered
	// again after its lease, a duplicate no kill caused.
	Unrecorded int
	// Wait is how long the last receipts took to arrive after the audit
	// of the ledger.
	Wait time.Duration
}

// unrecordedDelivery is in the line idemoutbox's runner logs when the
// receiver took an effect and the runner could not record the delivery.
const unrecordedDelivery = "delivered but its delivery could not be recorded"

// rows writes the audit's rows of the report's table; nil writes none.
func (e *Effects) rows(row func(string, any)) {
	if e == nil {
		return
	}
	row("charges at the processor", e.Charges)
	row("duplicate charges", e.DuplicateCharges)
	row("charged, never committed", e.ChargedNotCommitted)
	row("receipts received", e.Receipts)
	row("receipts for an uncommitted transfer", e.ReceiptsNotCommitted)
	row("committed transfers without a receipt", e.Undelivered)
	row("duplicate receipts (same key)", fmt.Sprintf("%d (%d)", e.DuplicateReceipts, e.DuplicateSameKey))
	row("deliveries not recorded, without a kill", e.Unrecorded)
	row("wait for the last receipt", e.Wait.Round(100*time.Millisecond))
}

// auditEffects reads the charges and receipts of the processor at base,
// waiting up to wait (2 minutes when 0) for every transfer of transfers,
// the committed ones by ID, to have its receipt.
func auditEffects(ctx context.Context, base string, transfers map[string]apiTransfer, wait time.Duration) (*Effects, error) {
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	start := time.Now()
	var receipts []processor.Receipt
	for {
		var list struct{ Receipts []processor.Receipt }
		if err := getJSON(ctx, base+"/v1/receipts", &list); err != nil {
			return nil, fmt.Errorf("audit: receipts: %w", err)
		}
		receipts = list.Receipts
		if undelivered(receipts, transfers) == 0 || time.Since(start) > wait {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	e := &Effects{Receipts: len(receipts), Wait: time.Since(start), Undelivered: undelivered(receipts, transfers)}
	firstKey := map[string]string{}
	for _, r := range receipts {
		id := receiptTransfer(r)
		if _, ok := transfers[id]; !ok {
			e.ReceiptsNotCommitted++
		}
		if k, seen := firstKey[id]; seen {
			e.DuplicateReceipts++
			if k == r.IdempotencyKey {
				e.DuplicateSameKey++
			}
			continue
		}
		firstKey[id] = r.IdempotencyKey
	}

	var list struct{ Charges []processor.Charge }
	if err := getJSON(ctx, base+"/v1/charges", &list); err != nil {
		return nil, fmt.Errorf("audit: charges: %w", err)
	}
	e.Charges = len(list.Charges)
	committed := map[string]bool{}
	for _, t := range transfers {
		committed[t.Memo] = true
	}
	charged := map[string]int{}
	for _, c := range list.Charges {
		charged[c.Description]++
	}
	for memo, n := range charged {
		e.DuplicateCharges += n - 1
		if !committed[memo] {
			e.ChargedNotCommitted++
		}
	}
	return e, nil
}

// undelivered counts the transfers without a receipt among receipts.
func undelivered(receipts []processor.Receipt, transfers map[string]apiTransfer) int {
	got := map[string]bool{}
	for _, r := range receipts {
		got[receiptTransfer(r)] = true
	}
	n := 0
	for id := range transfers {
		if !got[id] {
			n++
		}
	}
	return n
}

// receiptTransfer is the ID of the transfer receipt r is for.
func receiptTransfer(r processor.Receipt) string {
	var body struct {
		TransferID string `json:"transfer_id"`
	}
	_ = json.Unmarshal(r.Body, &body)
	return body.TransferID
}

// getJSON reads url's JSON answer into v.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, res.StatusCode)
	}
	return json.NewDecoder(res.Body).Decode(v)
}
