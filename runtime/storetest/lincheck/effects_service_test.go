package lincheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// The effects mode of the service: set only in the child of an effects
// run.
const (
	envProcessor = "IDEMGEN_LINCHECK_PROCESSOR" // the fake processor's URL
	envReceiver  = "IDEMGEN_LINCHECK_RECEIVER"  // the receipts' receiver's URL
	envBroken    = "IDEMGEN_LINCHECK_BROKEN"    // a broken handler or runner (the broken* constants); unset: none
)

// failAfterCharge is how many runs there are of a request in effects mode
// for each that fails after its charge (sideEffects.around), with the
// error failedAfterCharge; failAfterChargeForget is that number in a run
// of a store that forgets its phases (brokenForgetPhases), which only the
// retry of such a failure gives away: a loaded machine makes few requests
// in a short run, and one failure in sixteen could leave it unseen.
const (
	failAfterCharge       = 16
	failAfterChargeForget = 3
	failedAfterCharge     = "failed after its charge"
)

// failEvery is fx's failAfterCharge.
func (fx *sideEffects) failEvery() int {
	if fx.broken == brokenForgetPhases {
		return failAfterChargeForget
	}
	return failAfterCharge
}

// The names of a request's effects, for idem.EffectKey and idem.Phase.
const (
	effectCharge  = "charge"
	effectReceipt = "receipt"
)

// The broken versions of the effects mode, each of which one check of the
// effects runs must catch.
const (
	// brokenFreshKey charges the processor under a key drawn on every
	// run instead of the effect key.
	brokenFreshKey = "fresh-key"
	// brokenDirectReceipt sends the receipt from the handler, before
	// the request's transaction commits, instead of staging it.
	brokenDirectReceipt = "direct-receipt"
	// brokenDropFailed is a runner that counts a failed delivery as
	// delivered.
	brokenDropFailed = "drop-failed"
	// brokenForgetPhases is a PostgreSQL or Redis store that records
	// phases and never finds them again.
	brokenForgetPhases = "forget-phases"
)

// forgetPhases is pgstore broken as brokenForgetPhases says.
type forgetPhases struct{ *pgstore.Store }

// LoadPhase finds nothing.
func (forgetPhases) LoadPhase(context.Context, idemstore.Identity, string) ([]byte, bool, error) {
	return nil, false, nil
}

// forgetRedisPhases is redisstore broken as brokenForgetPhases says.
type forgetRedisPhases struct{ *redisstore.Store }

// LoadPhase finds nothing.
func (forgetRedisPhases) LoadPhase(context.Context, idemstore.Identity, string) ([]byte, bool, error) {
	return nil, false, nil
}

// postgresStore is pgstore on pool, broken when the service's effects
// mode says so.
func postgresStore(pool *pgxpool.Pool) idemstore.Store {
	s := pgstore.New(pool)
	if os.Getenv(envBroken) == brokenForgetPhases {
		return forgetPhases{s}
	}
	return s
}

// redisStore is redisstore on c, under the service's prefix, broken when
// the service's effects mode says so.
func redisStore(c redis.UniversalClient) (idemstore.Store, error) {
	s, err := redisstore.New(c, redisstore.WithPrefix(os.Getenv(envPrefix)))
	if err == nil && os.Getenv(envBroken) == brokenForgetPhases {
		return forgetRedisPhases{s}, nil
	}
	return s, err
}

// outbox is what the service needs of a dialect's outbox: staging in the
// request's transaction, and the runner's store.
type outbox interface {
	idemoutbox.Store
	Stage(ctx context.Context, name string, payload []byte) error
}

// sideEffects is the effects mode: each execution charges the processor
// in a recovery point under the charge's effect key and stages a receipt
// in its key's transaction, which the service's runner delivers.
type sideEffects struct {
	processor, receiver string
	broken              string
	outbox              outbox
	client              *http.Client
}

// startEffects returns the effects mode on ob and starts its runner, or
// nil when the service runs without effects. A store without an outbox
// (ob nil) charges and stages no receipt.
func startEffects(ob outbox) (*sideEffects, error) {
	fx := &sideEffects{
		processor: os.Getenv(envProcessor),
		receiver:  os.Getenv(envReceiver),
		broken:    os.Getenv(envBroken),
		outbox:    ob,
		client:    &http.Client{Timeout: 5 * time.Second},
	}
	if fx.processor == "" {
		return nil, nil
	}
	if ob == nil {
		return fx, nil
	}
	deliver := func(ctx context.Context, m idemoutbox.Message) error {
		return fx.post(ctx, fx.receiver, m.EffectKey, m.Payload, nil)
	}
	if fx.broken == brokenDropFailed {
		deliver = func(ctx context.Context, m idemoutbox.Message) error {
			_ = fx.post(ctx, fx.receiver, m.EffectKey, m.Payload, nil)
			return nil
		}
	}
	r, err := idemoutbox.NewRunner(idemoutbox.Config{
		Store:   ob,
		Deliver: deliver,
		// A refused receipt is tried again within a fraction of a run,
		// and a killed runner's effects are taken again after a lease
		// far above a loopback delivery's time.
		Backoff:     20 * time.Millisecond,
		MaxBackoff:  200 * time.Millisecond,
		MaxAttempts: 50,
		Lease:       2 * time.Second,
		Poll:        20 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	go func() { _ = r.Run(context.Background()) }()
	return fx, nil
}

// around returns record with the request's effects before it: the charge,
// then the receipt, then a pause of up to 20 ms, so that a kill can fall
// between the effects and the commit. One run in failAfterCharge fails
// (the handler's own 500) after its charge, so that its retry, which the
// engine lets run again, finds the charge's phase where the store records
// one beside the request: on Redis, whose operations fail closed, no
// crash lets a run's retry run again. Without the effects mode (fx nil) it
// is record.
func (fx *sideEffects) around(r *http.Request, record func(key, run, req string) error) func(key, run, req string) error {
	if fx == nil {
		return record
	}
	// The request's body, read ahead of execute and put back, names the
	// logical request with its key: a key whose request never committed
	// may be used again for another.
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return func(key, run, req string) error {
		if err != nil {
			return err
		}
		ctx := r.Context()
		charge, err := fx.charge(ctx, logical(key, string(body)))
		if err != nil {
			return fmt.Errorf("charge: %w", err)
		}
		if rand.IntN(fx.failEvery()) == 0 {
			return errors.New(failedAfterCharge)
		}
		payload, err := json.Marshal(receipt{Key: key, Run: run, Req: req, Body: string(body), Charge: charge})
		if err != nil {
			return err
		}
		if err := fx.sendReceipt(ctx, payload); err != nil {
			return fmt.Errorf("receipt: %w", err)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		return record(key, run, req)
	}
}

// sendReceipt stages the receipt in the request's transaction, or, broken,
// sends it at once.
func (fx *sideEffects) sendReceipt(ctx context.Context, payload []byte) error {
	switch {
	case fx.outbox == nil:
		return nil
	case fx.broken != brokenDirectReceipt:
		return fx.outbox.Stage(ctx, effectReceipt, payload)
	}
	ek, err := idem.EffectKey(ctx, effectReceipt)
	if err != nil {
		return err
	}
	return fx.post(ctx, fx.receiver, ek, payload, nil)
}

// charge charges the processor for the logical request (its key and
// body) in the recovery point effectCharge, and returns the charge's id. A store that cannot
// record a phase beside the request's transaction (SQLite) calls the
// processor on every run, under the same effect key.
func (fx *sideEffects) charge(ctx context.Context, request string) (string, error) {
	call := func(ctx context.Context, effectKey string) ([]byte, error) {
		if fx.broken == brokenFreshKey {
			effectKey = randomHex(16)
		}
		body, err := json.Marshal(chargeRequest{Request: request})
		if err != nil {
			return nil, err
		}
		var a chargeAnswer
		if err := fx.post(ctx, fx.processor, effectKey, body, &a); err != nil {
			return nil, err
		}
		return []byte(a.ID), nil
	}
	id, err := idem.Phase(ctx, effectCharge, call)
	if errors.Is(err, idem.ErrNoPhases) {
		var ek string
		if ek, err = idem.EffectKey(ctx, effectCharge); err == nil {
			id, err = call(ctx, ek)
		}
	}
	return string(id), err
}

// post POSTs body to url under Idempotency-Key key and decodes a 2xx's
// answer into out, when out is set; any other status is an error.
func (fx *sideEffects) post(ctx context.Context, url, key string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := fx.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", url, res.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(res.Body).Decode(out)
}
