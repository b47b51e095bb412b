package idem

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// Outcome names what the engine did with one protected request.
type Outcome string

// The outcomes an Observer sees.
const (
	// OutcomeExecuted: the claim was won and the handler ran; its response
	// was stored.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReleased: the handler ran but its status is never stored (401,
	// 429, 503, …), so the claim was released for a retry.
	OutcomeReleased Outcome = "released"
	// OutcomeTakeover: an abandoned claim was taken over and the handler ran.
	OutcomeTakeover Outcome = "takeover"
	// OutcomeReplayed: a stored response was replayed.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeNotReplayable: the stored response had no body to replay.
	OutcomeNotReplayable Outcome = "not-replayable"
	// OutcomeInFlight: another request holds the key; 409.
	OutcomeInFlight Outcome = "in-flight"
	// OutcomeMismatch: the key was reused for a different request; 422.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeIndeterminate: the key's outcome is unknown; 409.
	OutcomeIndeterminate Outcome = "indeterminate"
	// OutcomeFenced: the handler ran but another request took the key over
	// meanwhile; its response was discarded.
	OutcomeFenced Outcome = "fenced"
	// OutcomeNoAnswer: the handler returned without writing a status or
	// a byte; nothing was stored and the claim was abandoned.
	OutcomeNoAnswer Outcome = "no-answer"
	// OutcomePanicked: the handler panicked; the claim was abandoned.
	OutcomePanicked Outcome = "panicked"
	// OutcomeStoreError: the store failed; 503, or the completion was lost.
	OutcomeStoreError Outcome = "store-error"
	// OutcomeRejected: the request was refused before any claim (missing or
	// invalid key, unparseable body, unresolved tenant).
	OutcomeRejected Outcome = "rejected"
	// OutcomeNoKey: no key and none required; the handler ran unprotected.
	OutcomeNoKey Outcome = "no-key"
	// OutcomeClientGone: the client hung up before the claim or before the
	// handler started; the handler did not run and no claim was kept. It
	// is named as the problem the engine answers with.
	OutcomeClientGone = Outcome(problem.ClientGone)
)

// Event describes one protected request after the engine has answered it.
type Event struct {
	Operation string
	Tenant    string
	// KeyLabel names the request's key as the logs do (KeyLabel, or the
	// key itself with Config.LogKeys); empty when the request had no key.
	KeyLabel string
	// State is the state of the stored key the request met: empty when
	// there was none (a new key, or an expired one), StateInFlight for a
	// key held by another request or taken over, StateCompleted for a
	// replay, StateIndeterminate for outcome-unknown.
	State   idemstore.State
	Outcome Outcome
	// Status is the HTTP status sent to the client.
	Status int
	// Duration is the whole time spent in the engine, handler included.
	Duration time.Duration
	// StoreDuration is the time spent waiting on the store.
	StoreDuration time.Duration
	// Err is the store or handler error behind OutcomeStoreError,
	// OutcomeFenced or OutcomePanicked.
	Err error
}

// Observer sees every outcome, for metrics and tracing. Observe is called
// synchronously after the response is written; keep it fast.
type Observer interface {
	Observe(ctx context.Context, ev Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, ev Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, ev Event) { f(ctx, ev) }

// observe reports a finished request to the Observer.
func (e *Engine) observe(ctx context.Context, q *request) {
	q.event.Duration = time.Since(q.start)
	if e.observer != nil {
		if q.key != "" {
			// Computed here, not on admission, so that an engine without
			// an observer pays for no HMAC on the fast path.
			q.event.KeyLabel = e.keyLabel(q.key)
		}
		e.observer.Observe(ctx, q.event)
	}
}

// outcome records o unless the request already has one (a keyless run is
// OutcomeNoKey whatever its status).
func (e *Engine) outcome(q *request, o Outcome) {
	if q.event.Outcome == "" {
		q.event.Outcome = o
	}
}
