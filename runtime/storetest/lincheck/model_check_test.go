package lincheck

import (
	"net/http"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/runtime/problem"
)

// Hand-written histories of one key, each with the verdict the contract
// gives it: the model accepts what the contract allows and refuses the
// rest, so a store or engine that answers otherwise fails the suite.
func TestModelVerdicts(t *testing.T) {
	const body, other = `{"amount":1}`, `{"amount":2}`
	answer := `{"run":"00000000000000aa","request":` + body + `}`
	executed := func(call, ret int64) *op {
		return &op{Body: body, Call: call, Return: ret, Status: http.StatusCreated, Answer: []byte(answer)}
	}
	replayed := func(call, ret int64, a string) *op {
		return &op{Body: body, Call: call, Return: ret, Status: http.StatusCreated, Replayed: true, Answer: []byte(a)}
	}
	refused := func(call, ret int64, b string, status int, name string) *op {
		return &op{Body: b, Call: call, Return: ret, Status: status, Problem: name}
	}
	lost := func(call, ret int64) *op {
		return &op{Body: body, Call: call, Return: ret, Err: "connection reset", Faulted: true}
	}
	failed := func(call, ret int64) *op {
		return &op{Body: body, Call: call, Return: ret, Status: http.StatusInternalServerError, Answer: []byte(handlerFailure + failedAfterCharge)}
	}
	for _, tc := range []struct {
		name          string
		ops           []*op
		transactional bool
		ok            bool
		// guard: the claim may lose the key's guard (model.guardMayRefuse).
		guard bool
	}{
		{"an execution and its replay", []*op{executed(0, 10), replayed(20, 30, answer)}, false, true, false},
		{"a replay of other bytes", []*op{executed(0, 10), replayed(20, 30, `{"run":"00000000000000bb","request":`+body+`}`)}, false, false, false},
		{"two executions", []*op{executed(0, 10), executed(20, 30)}, false, false, false},
		{"two concurrent executions", []*op{executed(0, 10), executed(5, 15)}, false, false, false},
		{"409 while the execution runs", []*op{executed(0, 10), refused(2, 8, body, http.StatusConflict, problem.InProgress)}, false, true, false},
		{"409 after the execution answered", []*op{executed(0, 10), refused(20, 30, body, http.StatusConflict, problem.InProgress)}, false, false, false},
		{"409 with nothing claimed", []*op{refused(0, 10, body, http.StatusConflict, problem.InProgress)}, false, false, false},
		{"422 for another body", []*op{executed(0, 10), refused(20, 30, other, http.StatusUnprocessableEntity, problem.KeyReused)}, false, true, false},
		{"422 for the same body", []*op{executed(0, 10), refused(20, 30, body, http.StatusUnprocessableEntity, problem.KeyReused)}, false, false, false},
		{"a replay for another body", []*op{executed(0, 10), {Body: other, Call: 20, Return: 30, Status: http.StatusCreated, Replayed: true, Answer: []byte(answer)}}, false, false, false},
		{"503 with no fault: a store slower than the store timeout", []*op{refused(0, 10, body, http.StatusServiceUnavailable, problem.StoreUnavailable)}, false, true, false},
		{"outcome-unknown with no fault", []*op{refused(0, 10, body, http.StatusConflict, problem.OutcomeUnknown)}, false, false, false},
		{"outcome-unknown after a lost request", []*op{lost(0, 10), refused(20, 30, body, http.StatusConflict, problem.OutcomeUnknown)}, false, true, false},
		{"409 after a lost request", []*op{lost(0, 10), refused(20, 30, body, http.StatusConflict, problem.InProgress)}, false, true, false},
		{"a second execution after a lost request, transactional", []*op{lost(0, 10), executed(20, 30)}, true, true, false},
		{"an execution after a hang-up during a fault", []*op{{Body: body, Call: 0, Return: 10, Err: "context canceled", HungUp: true, Faulted: true}, refused(2, 4, body, http.StatusConflict, problem.InProgress), executed(20, 30)}, false, true, false},
		{"an execution after a lost request, not transactional", []*op{lost(0, 10), refused(12, 14, body, http.StatusConflict, problem.InProgress), executed(20, 30)}, false, false, false},
		{"an execution after outcome-unknown", []*op{lost(0, 10), refused(20, 30, body, http.StatusConflict, problem.OutcomeUnknown), executed(40, 50)}, false, false, false},
		// A 503 outside a fault did not process its request: its claim may
		// stand a while, but it never completes.
		{"a replay after a 503 with no fault", []*op{refused(0, 10, body, http.StatusServiceUnavailable, problem.StoreUnavailable), replayed(20, 30, answer)}, true, false, false},
		{"an execution after a 503 with no fault", []*op{refused(0, 10, body, http.StatusServiceUnavailable, problem.StoreUnavailable), executed(20, 30)}, true, true, false},
		{"409 after a 503 with no fault", []*op{refused(0, 10, body, http.StatusServiceUnavailable, problem.StoreUnavailable), refused(20, 30, body, http.StatusConflict, problem.InProgress)}, false, true, false},
		{"outcome-unknown after a 503 with no fault", []*op{refused(0, 10, body, http.StatusServiceUnavailable, problem.StoreUnavailable), refused(20, 30, body, http.StatusConflict, problem.OutcomeUnknown)}, false, true, false},
		{"a faulted 503 that completed unseen", []*op{{Body: body, Call: 0, Return: 10, Status: http.StatusServiceUnavailable, Problem: problem.StoreUnavailable, Faulted: true}, replayed(20, 30, answer)}, true, true, false},
		// The effects mode's handler failing after its charge ran on a
		// claim of its own, which the engine gave back.
		{"an execution after a failure after the charge", []*op{failed(0, 10), refused(2, 8, body, http.StatusConflict, problem.InProgress), executed(20, 30)}, false, true, false},
		{"a replay after a failure after the charge alone", []*op{failed(0, 10), replayed(20, 30, answer)}, false, false, false},
		{"a failure after the charge after an execution", []*op{executed(0, 10), failed(20, 30)}, false, false, false},
		{"409 after a failure after the charge", []*op{failed(0, 10), refused(20, 30, body, http.StatusConflict, problem.InProgress)}, false, false, false},
		// A claim that loses the key's guard lost it to another request.
		{"409 that lost the guard to a request beside it", []*op{refused(0, 10, body, http.StatusConflict, problem.InProgress), refused(5, 15, other, http.StatusUnprocessableEntity, problem.KeyReused), executed(20, 30)}, true, true, true},
		{"409 alone on a key never claimed, guard", []*op{refused(0, 10, body, http.StatusConflict, problem.InProgress), executed(20, 30)}, true, false, true},
		{"409s in a row with nobody there, guard", []*op{refused(0, 10, body, http.StatusConflict, problem.InProgress), refused(20, 30, body, http.StatusConflict, problem.InProgress), refused(40, 50, body, http.StatusConflict, problem.InProgress)}, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, o := range tc.ops {
				o.ID, o.Client, o.Key = i, i, "k"
				o.result = classify(o)
			}
			markOverlaps(tc.ops)
			history := operations(tc.ops)
			m := model{transactional: tc.transactional, guardMayRefuse: tc.guard}
			if got := porcupine.CheckOperations(m.porcupine(), history); got != tc.ok {
				t.Errorf("linearizable = %v, want %v", got, tc.ok)
			}
		})
	}
}
