package lincheck

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"net/http"
	"sort"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/runtime/problem"
)

// result is what a client made of one answer, as the model judges it.
type result int

const (
	resExecuted          result = iota // 201 without Idempotent-Replayed: the handler ran
	resReplayed                        // 201 with Idempotent-Replayed: true
	resMismatch                        // 422 idempotency-key-reused
	resInProgress                      // 409 request-in-progress
	resIndeterminate                   // 409 outcome-unknown
	resUnknown                         // 500 outcome-unknown: this request's own commit is in doubt
	resUnavailable                     // 503 idempotency-store-unavailable
	resHandlerFailed                   // the handler's own 500: its transaction failed, nothing stored
	resFailedAfterCharge               // the handler's own 500 on purpose, after its charge: nothing stored, the key released
	resNoAnswer                        // the client got no answer: the service died, or the client hung up
	resOther                           // anything else, which the contract never answers here
)

var resultNames = [...]string{"executed", "replayed", "422 mismatch", "409 in-progress",
	"409 outcome-unknown", "500 outcome-unknown", "503 unavailable", "500 handler", "500 after the charge", "no answer", "other"}

func (r result) String() string { return resultNames[r] }

// classify reads an answer the way the contract names it.
func classify(o *op) result {
	switch {
	case o.Err != "":
		return resNoAnswer
	case o.Status == http.StatusCreated && !o.Replayed:
		return resExecuted
	case o.Status == http.StatusCreated:
		return resReplayed
	case o.Status == http.StatusUnprocessableEntity && o.Problem == problem.KeyReused:
		return resMismatch
	case o.Status == http.StatusConflict && o.Problem == problem.InProgress:
		return resInProgress
	case o.Status == http.StatusConflict && o.Problem == problem.OutcomeUnknown:
		return resIndeterminate
	case o.Status == http.StatusInternalServerError && o.Problem == problem.OutcomeUnknown:
		return resUnknown
	case o.Status == http.StatusServiceUnavailable && o.Problem == problem.StoreUnavailable:
		return resUnavailable
	case o.Status == http.StatusInternalServerError && o.Problem == "" && bytes.HasPrefix(o.Answer, []byte(handlerFailure+failedAfterCharge)):
		return resFailedAfterCharge
	case o.Status == http.StatusInternalServerError && o.Problem == "" && bytes.HasPrefix(o.Answer, []byte(handlerFailure)):
		return resHandlerFailed
	}
	return resOther
}

// kind is the state of one stored key.
type kind int

const (
	free kind = iota
	held
	done
	indeterminate
)

var kindNames = [...]string{"free", "held", "done", "indeterminate"}

// phantom is the holder of a claim that no client is waiting on: one that a
// faulted request may have left in the store (its claim's reply lost, its
// service killed, its completion failed).
const phantom = -1

// keyState is the model's state of one (tenant, scope, key). Body is the
// request whose claim stands (the fingerprint: the policy fingerprints the
// whole body), Answer the executed answer's bytes once known, Holder the
// operation holding a live claim. Unrun marks a claim nobody waits on
// whose handler is known not to have run (or whose writes were rolled
// back): the claim of a 503 outside a fault, which can never complete.
type keyState struct {
	Kind   kind
	Body   string
	Answer string
	Holder int
	Unrun  bool
}

func (s keyState) String() string {
	switch s.Kind {
	case free:
		return "free"
	case held:
		h := fmt.Sprintf("op %d", s.Holder)
		switch {
		case s.Holder == phantom && s.Unrun:
			h = "nobody waiting, never run"
		case s.Holder == phantom:
			h = "nobody waiting"
		}
		return fmt.Sprintf("held by %s for %s", h, s.Body)
	}
	a := s.Answer
	if a == "" {
		a = "(answer not yet seen)"
	}
	return fmt.Sprintf("%s for %s: %s", kindNames[s.Kind], s.Body, a)
}

// step is one porcupine operation: each request is split into a begin
// (where it meets the key: claims it, replays, conflicts) and an end (where
// an executing request completes), both spanning the request's whole
// interval, so that other requests can meet its claim in between.
type step struct {
	op  *op
	end bool
}

// model is the contract's state machine for one key. Transactional says
// whether a claim nobody waits on can vanish (rolled back with its
// transaction, or taken over after its lease) rather than only turn
// indeterminate or complete.
//
// OtherBodyMayBeBusy tolerates one known deviation: a 409
// request-in-progress, instead of the 422 the contract asks for, to a
// request whose body differs from that of the claim standing on the key.
// pgstore's transactional claim answers so when another request with the
// same body holds that request's advisory lock for a moment (it is
// losing the key too, and answers 422); docs/verification.md tells the
// story. Every other check stays strict.
//
// GuardMayRefuse says that a claim may win the key's row and still give it
// back unrun, answering 409: pgstore's transactional claim does so when the
// key's guard lock is held elsewhere (docs/semantics.md §5.1). Only another
// request on the key holds its guard, so the model allows it only to a
// request that overlapped another on its key: a key that answers 409 with
// nobody else there is stuck (a leaked lock), and refused.
type model struct {
	transactional      bool
	otherBodyMayBeBusy bool
	guardMayRefuse     bool
}

func (m model) porcupine() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionByKey,
		Init:      func() []interface{} { return []interface{}{keyState{Holder: phantom}} },
		Step: func(state, input, _ interface{}) []interface{} {
			var out []interface{}
			for _, s := range m.step(state.(keyState), input.(step)) {
				out = append(out, s)
			}
			return out
		},
		Hash: func(state interface{}) uint64 {
			s := state.(keyState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%d|%s|%s|%d|%t", s.Kind, s.Body, s.Answer, s.Holder, s.Unrun)
			return h.Sum64()
		},
		DescribeOperation: func(input, _ interface{}) string {
			st := input.(step)
			return st.op.describe(st.end)
		},
		DescribeState: func(state interface{}) string { return state.(keyState).String() },
	}
	return nm.ToModel()
}

// partitionByKey checks each key on its own: the contract relates only
// requests that share a key.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, o := range history {
		k := o.Input.(step).op.Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], o)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

// step returns every state the key can be in after st, from s.
func (m model) step(s keyState, st step) []keyState {
	o := st.op
	starts := []keyState{s}
	if o.Faulted && !st.end && s.Kind == free {
		// A faulted request may have claimed before its answer was lost
		// or turned into another one (a retried script meeting its own
		// claim answers 409).
		starts = append(starts, keyState{Kind: held, Body: o.Body, Holder: phantom})
	}
	var out []keyState
	for _, s0 := range starts {
		for _, s1 := range m.settle(s0) {
			out = append(out, m.apply(s1, st)...)
		}
	}
	return out
}

// settle lists what a claim nobody waits on may have become by now: it may
// still stand, be judged indeterminate after its lease, have completed
// unseen (unless its handler is known not to have run), or
// (transactional stores) have vanished with its transaction.
func (m model) settle(s keyState) []keyState {
	if s.Kind != held || s.Holder != phantom {
		return []keyState{s}
	}
	out := []keyState{s, {Kind: indeterminate, Body: s.Body, Holder: phantom}}
	if !s.Unrun {
		out = append(out, keyState{Kind: done, Body: s.Body, Answer: s.Answer, Holder: phantom})
	}
	if m.transactional {
		out = append(out, keyState{Holder: phantom})
	}
	return out
}

// apply is the contract's answer to o when the key is in state s.
func (m model) apply(s keyState, st step) []keyState {
	o := st.op
	self := func() []keyState { return []keyState{s} }
	switch o.result {
	case resExecuted:
		if !st.end {
			if s.Kind != free || !answers(o) {
				return nil
			}
			return []keyState{{Kind: held, Body: o.Body, Answer: string(o.Answer), Holder: o.ID}}
		}
		if s.Kind != held || s.Holder != o.ID {
			return nil
		}
		out := []keyState{{Kind: done, Body: o.Body, Answer: s.Answer, Holder: phantom}}
		if o.Faulted {
			// Its completion may have been lost: the claim stays.
			out = append(out, keyState{Kind: held, Body: o.Body, Answer: s.Answer, Holder: phantom})
		}
		return out
	case resReplayed:
		if st.end {
			return self()
		}
		if s.Kind != done || s.Body != o.Body {
			return nil
		}
		if s.Answer == "" && answers(o) {
			s.Answer = string(o.Answer)
		}
		if s.Answer != string(o.Answer) {
			return nil
		}
		return self()
	case resMismatch:
		if st.end || (s.Kind != free && s.Body != o.Body) {
			return self()
		}
		return nil
	case resInProgress:
		if st.end {
			if s.Kind == held && s.Holder == o.ID {
				// Its own claim, given back unrun.
				return []keyState{{Holder: phantom}}
			}
			return self()
		}
		var out []keyState
		if s.Kind == held && (s.Body == o.Body || m.otherBodyMayBeBusy) {
			out = self()
		}
		if m.guardMayRefuse && o.Overlapped && s.Kind == free {
			// Its own claim won the key's row but not its guard, and was
			// given back before its handler ran.
			out = append(out, keyState{Kind: held, Body: o.Body, Holder: o.ID})
		}
		return out
	case resIndeterminate:
		if st.end || (s.Kind == indeterminate && s.Body == o.Body) {
			return self()
		}
		return nil
	case resUnavailable:
		if o.Faulted {
			return m.lost(s, st)
		}
		return notRun(s, st)
	case resFailedAfterCharge:
		return failedAfterChargeStep(s, st)
	case resUnknown, resHandlerFailed, resNoAnswer:
		if !o.Faulted && o.result != resNoAnswer {
			return nil
		}
		return m.lost(s, st)
	}
	return nil
}

// failedAfterChargeStep is the effects mode's handler failing on purpose
// after its charge: it claimed the free key and ran, and the engine gives
// the key back with nothing stored. Under a fault the release may have
// been lost, and the claim stays, never to complete.
func failedAfterChargeStep(s keyState, st step) []keyState {
	o := st.op
	if !st.end {
		if s.Kind != free {
			return nil
		}
		return []keyState{{Kind: held, Body: o.Body, Holder: o.ID}}
	}
	if s.Kind != held || s.Holder != o.ID {
		return nil
	}
	out := []keyState{{Holder: phantom}}
	if o.Faulted {
		out = append(out, keyState{Kind: held, Body: o.Body, Holder: phantom, Unrun: true})
	}
	return out
}

// notRun is a 503 outside an injected fault: the engine says it did not
// process the request. Its claim may have landed after the engine stopped
// waiting, or its transaction may have failed to commit; it is released
// by its own token, or stays, if that fails too, until its lease ends.
// Either way its handler's effect is not in the store.
func notRun(s keyState, st step) []keyState {
	o := st.op
	if out, ended := mayHaveClaimed(s, st); !ended {
		return out
	}
	return []keyState{{Holder: phantom}, {Kind: held, Body: o.Body, Holder: phantom, Unrun: true}}
}

// mayHaveClaimed is what a request whose claim may have landed does to
// the key, except at the end of its own claim: at its begin the key stays
// as it is or, when free, is held by it; at its end the key stays as it
// is unless it holds it. ended reports that it holds the key at its end,
// which is the caller's to decide.
func mayHaveClaimed(s keyState, st step) (out []keyState, ended bool) {
	o := st.op
	switch {
	case !st.end && s.Kind == free:
		return []keyState{s, {Kind: held, Body: o.Body, Holder: o.ID}}, false
	case !st.end || s.Kind != held || s.Holder != o.ID:
		return []keyState{s}, false
	}
	return nil, true
}

// lost is a request whose answer was lost or that a fault cut short: it
// may leave a claim nobody waits on, which may still execute unseen.
func (m model) lost(s keyState, st step) []keyState {
	o := st.op
	if out, ended := mayHaveClaimed(s, st); !ended {
		return out
	}
	if !o.Faulted {
		// A client that hung up: the engine finishes its request, or
		// rolls it back and releases the key; it never leaves the key
		// held.
		return []keyState{{Kind: done, Body: o.Body, Holder: phantom}, {Holder: phantom}}
	}
	out := []keyState{{Kind: held, Body: o.Body, Holder: phantom}}
	if m.transactional || o.result != resNoAnswer || o.HungUp {
		// Rolled back, or released by an engine that knows its
		// handler did not run (a client that hung up before it did).
		// A non-transactional request whose service died may have
		// run its handler: its claim can only be judged, never
		// vanish.
		out = append(out, keyState{Holder: phantom})
	}
	return out
}

// answers reports whether o's answer is one the handler gives to o's body.
func answers(o *op) bool {
	return bytes.HasPrefix(o.Answer, []byte(`{"run":"`)) &&
		bytes.HasSuffix(o.Answer, []byte(`","request":`+o.Body+`}`))
}
