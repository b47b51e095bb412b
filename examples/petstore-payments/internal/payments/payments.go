// Package payments is what a transfer does outside the ledger: it charges
// the payment processor for the transfer, under the request's effect key
// and through a recovery point, and stages the transfer's receipt in the
// request's transaction, for the outbox's runner to deliver afterwards
// (docs/effects.md).
package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/api"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
)

// callTimeout bounds one call to the processor or the receipt receiver.
const callTimeout = 5 * time.Second

// Outbox is the transactional outbox of the service's store: Stage in a
// request's transaction, and the runner's side.
type Outbox interface {
	idemoutbox.Store
	Stage(ctx context.Context, name string, payload []byte) error
}

// Config configures Payments.
type Config struct {
	// ProcessorURL is the processor's base URL; "" charges nothing.
	ProcessorURL string
	// ReceiptsURL is where receipts are POSTed; "" sends none.
	ReceiptsURL string
	// Outbox stages the receipts; required with ReceiptsURL.
	Outbox Outbox
	Logger *slog.Logger
}

// Payments charges and sends receipts for transfers.
type Payments struct {
	cfg    Config
	client *http.Client
}

// New returns the payments of cfg, or nil when cfg asks for nothing.
func New(cfg Config) (*Payments, error) {
	if cfg.ProcessorURL == "" && cfg.ReceiptsURL == "" {
		return nil, nil
	}
	if cfg.ReceiptsURL != "" && cfg.Outbox == nil {
		return nil, errors.New("payments: receipts need an outbox")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.ProcessorURL = strings.TrimSuffix(cfg.ProcessorURL, "/")
	return &Payments{cfg: cfg, client: &http.Client{Timeout: callTimeout}}, nil
}

// Receipt is the payload of a transfer's receipt.
type Receipt struct {
	TransferID string `json:"transfer_id"`
	Memo       string `json:"memo"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	ChargeID   string `json:"charge_id,omitempty"`
}

// Settle does what transfer t needs outside the ledger, in the handler's
// context ctx, after the ledger's writes and before the transaction
// commits: it charges the processor (once per request, however often the
// handler runs), and stages the receipt in the transaction, so that a
// receipt exists if and only if the transfer commits. An error wraps
// server.ErrUnavailable when the processor did not answer.
func (p *Payments) Settle(ctx context.Context, t ledger.Transfer) error {
	var chargeID string
	if p.cfg.ProcessorURL != "" {
		var err error
		if chargeID, err = p.charge(ctx, t); err != nil {
			return err
		}
	}
	if p.cfg.ReceiptsURL == "" {
		return nil
	}
	payload, err := json.Marshal(Receipt{TransferID: t.ID, Memo: t.Memo, Amount: t.Amount, Currency: t.Currency, ChargeID: chargeID})
	if err != nil {
		return err
	}
	if err := p.cfg.Outbox.Stage(ctx, api.CreateTransferEffectReceipt, payload); err != nil {
		return fmt.Errorf("stage the receipt: %w", err)
	}
	return nil
}

// charge charges the processor for t under the request's effect key, in
// the recovery point api.CreateTransferEffectCharge: once a run recorded
// the charge, later runs of the request receive it without calling the
// processor, and a run that died between the call and its record is
// followed by a call with the same key, which the processor answers with
// the first charge
// (docs/semantics.md §8.2). A store that cannot record a phase beside the
// request's transaction (SQLite) calls the processor on every run, with
// the same key: the key alone keeps the charge to one.
func (p *Payments) charge(ctx context.Context, t ledger.Transfer) (string, error) {
	res, err := idem.Phase(ctx, api.CreateTransferEffectCharge, func(ctx context.Context, effectKey string) ([]byte, error) {
		return p.callProcessor(ctx, effectKey, t)
	})
	if errors.Is(err, idem.ErrNoPhases) {
		var key string
		if key, err = idem.EffectKey(ctx, api.CreateTransferEffectCharge); err == nil {
			res, err = p.callProcessor(ctx, key, t)
		}
	}
	if err != nil {
		return "", err
	}
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res, &c); err != nil || c.ID == "" {
		return "", fmt.Errorf("charge: the processor's answer %q has no id", res)
	}
	return c.ID, nil
}

// callProcessor asks the processor for t's charge under effectKey and
// returns its answer.
func (p *Payments) callProcessor(ctx context.Context, effectKey string, t ledger.Transfer) ([]byte, error) {
	body, err := json.Marshal(map[string]any{"amount": t.Amount, "currency": t.Currency, "description": t.Memo})
	if err != nil {
		return nil, err
	}
	return p.post(ctx, p.cfg.ProcessorURL+"/v1/charges", effectKey, body)
}

// post POSTs body to url with Idempotency-Key: key and returns the answer
// of a 2xx. Anything else wraps server.ErrUnavailable: the call may be
// made again, with the same key.
func (p *Payments) post(ctx context.Context, url, key string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", server.ErrUnavailable, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", server.ErrUnavailable, url, err)
	}
	if res.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%w: %s answered %d %s", server.ErrUnavailable, url, res.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// Runner returns the outbox's runner, which delivers the staged receipts
// to the receiver with their effect keys, or nil without receipts. It
// runs in the service until the service stops.
func (p *Payments) Runner() (*idemoutbox.Runner, error) {
	if p == nil || p.cfg.ReceiptsURL == "" {
		return nil, nil
	}
	return idemoutbox.NewRunner(idemoutbox.Config{
		Store: p.cfg.Outbox,
		Deliver: func(ctx context.Context, m idemoutbox.Message) error {
			_, err := p.post(ctx, p.cfg.ReceiptsURL, m.EffectKey, m.Payload)
			return err
		},
		// A receiver that is away for a restart is tried again soon; one
		// that is away for long is tried every half a minute at most.
		Backoff:     200 * time.Millisecond,
		MaxBackoff:  30 * time.Second,
		MaxAttempts: 20,
		// Well above callTimeout: a delivery that outlives its lease may
		// be made again by another runner.
		Lease:  4 * callTimeout,
		Poll:   250 * time.Millisecond,
		Logger: p.cfg.Logger,
	})
}
