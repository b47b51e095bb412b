package outboxtest

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// The names of the suite's effects: a receipt every receiver accepts, and
// a poison one the suite's receivers always refuse.
const (
	receipt = "receipt"
	poison  = "poison"
)

// handler is the suite's operation. It makes the business write of its
// key (on the transactional path) and stages an effect whose payload is
// the key, then answers by X-Mode:
//
//	""         201
//	rollback   500, which the engine never keeps: everything rolls back
//	panic      a panic: everything rolls back
//	big        stages a payload over the limit, answers 413
//	twice      stages the effect twice, answers 201
//	poison     stages the poison effect, answers 201
//	hang       prints "ready" after staging and waits to be killed
//
// A Stage error other than twice's second answers 422. It keeps each
// key's Stage errors and effect key for the suite to check.
type handler struct {
	inst Instance

	mu   sync.Mutex
	errs map[string][]error
	eks  map[string]string
}

func newHandler(inst Instance) *handler {
	return &handler{inst: inst, errs: make(map[string][]error), eks: make(map[string]string)}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, mode := r.Header.Get("Idempotency-Key"), r.Header.Get("X-Mode")
	if r.URL.Path == txPath {
		if err := h.inst.Write(ctx, key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	name, payload := receipt, []byte(key)
	switch mode {
	case "big":
		payload = make([]byte, maxPayload+1)
	case "poison":
		name = poison
	}
	ek, _ := idem.EffectKey(ctx, name)
	err := h.inst.Outbox.Stage(ctx, name, payload)
	if mode == "twice" && err == nil {
		err = h.inst.Outbox.Stage(ctx, name, payload)
	}
	h.mu.Lock()
	h.errs[key] = append(h.errs[key], err)
	h.eks[key] = ek
	h.mu.Unlock()
	switch {
	case mode == "hang":
		fmt.Println("ready")
		time.Sleep(2 * time.Minute)
	case mode == "rollback":
		http.Error(w, "rolled back", http.StatusInternalServerError)
	case mode == "panic":
		panic("the handler panics after staging")
	case errors.Is(err, idemoutbox.ErrTooLarge):
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
	case err != nil && mode != "twice":
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
	default:
		enginetest.Created(w, key)
	}
}

// stageErrs returns the Stage errors key's requests met.
func (h *handler) stageErrs(key string) []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.errs[key]
}

// effectKey returns the effect key the handler of key was given.
func (h *handler) effectKey(key string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.eks[key]
}
