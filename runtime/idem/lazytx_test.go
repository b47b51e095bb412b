package idem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// beginStore is txStore with its plain transactions counted, and failed
// while fail holds an error; a plain claim's completion fails while
// completeFail holds one.
type beginStore struct {
	*txStore
	begins       atomic.Int64
	fail         atomic.Pointer[error]
	completeFail atomic.Pointer[error]
}

func (s *beginStore) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	if err := s.completeFail.Load(); err != nil {
		return *err
	}
	return s.txStore.Complete(ctx, id, token, resp)
}

func (s *beginStore) Begin(ctx context.Context, lease time.Duration) (idemstore.Tx, error) {
	s.begins.Add(1)
	if err := s.fail.Load(); err != nil {
		return nil, *err
	}
	return s.txStore.Begin(ctx, lease)
}

// looseEngine serves a transactional createTransfer, whose key is
// optional, with a handler mounted without its adapter, by X-Mode: "idle"
// takes no transaction, "reject" answers 400 as a strict server does to a
// body it cannot decode, before any transaction is asked for, "unexecuted"
// does the same after calling idem.NotExecuted, "adapter" hands the request on to idem.TxHandler,
// "strict" asks idem.TxFor and answers its error, and "leak" keeps the
// request's context for after the answer. ran counts the runs of the
// handler behind the adapter; strictErr is TxFor's last error.
type looseEngine struct {
	h         http.Handler
	store     *beginStore
	ran       atomic.Int64
	strictErr error
	leaked    context.Context
}

func newLooseEngine(t *testing.T) *looseEngine {
	t.Helper()
	le := &looseEngine{store: &beginStore{txStore: &txStore{memstore.New()}}}
	p := transferPolicy()
	p.Transactional, p.Required = true, false
	e := newEngine(t, idem.Config{Store: le.store, Policies: []idem.Policy{p}})
	adapter := idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx string) {
		le.ran.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	le.h = e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Mode") {
		case "adapter":
			adapter.ServeHTTP(w, r)
			return
		case "strict":
			if _, le.strictErr = idem.TxFor[string](r.Context(), "createTransfer"); le.strictErr != nil {
				http.Error(w, le.strictErr.Error(), http.StatusInternalServerError)
				return
			}
		case "leak":
			le.leaked = r.Context()
		case "reject":
			http.Error(w, "the body does not decode", http.StatusBadRequest)
			return
		case "unexecuted":
			idem.NotExecuted(r.Context())
			http.Error(w, "the body does not decode", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	return le
}

func (le *looseEngine) post(t *testing.T, key, mode string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Mode", mode)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	le.h.ServeHTTP(w, r)
	return w
}

// flag sends the request that shows the engine a handler that does not
// take its transaction; from then on the operation runs in durable mode.
func (le *looseEngine) flag(t *testing.T) {
	t.Helper()
	if w := le.post(t, "flag", "idle"); w.Code != http.StatusCreated {
		t.Fatalf("flagging request: status %d, body %s", w.Code, w.Body)
	}
}

// In durable mode the handler's transaction begins only when the handler
// asks for it, keyed or keyless: no transaction is open while the handler
// runs without one, so a handler writing through its pool (on SQLite) never
// waits for a write lock its own request holds.
func TestDurableModeBeginsOnlyWhenAsked(t *testing.T) {
	le := newLooseEngine(t)
	le.flag(t)
	for _, key := range []string{"idle", ""} {
		if w := le.post(t, key, "idle"); w.Code != http.StatusCreated {
			t.Fatalf("key %q: status %d, body %s", key, w.Code, w.Body)
		}
	}
	if w := le.post(t, "idle", "idle"); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: status %d, not replayed", w.Code)
	}
	if n := le.store.begins.Load(); n != 0 {
		t.Fatalf("%d transactions began for handlers that never asked for one", n)
	}
	for _, key := range []string{"adapter", ""} {
		if w := le.post(t, key, "adapter"); w.Code != http.StatusCreated {
			t.Fatalf("key %q through the adapter: status %d, body %s", key, w.Code, w.Body)
		}
	}
	if n, ran := le.store.begins.Load(), le.ran.Load(); n != 2 || ran != 2 {
		t.Fatalf("%d transactions began and the adapter's handler ran %d times, want 2 and 2", n, ran)
	}
	if w := le.post(t, "adapter", "adapter"); w.Header().Get("Idempotent-Replayed") != "true" || le.ran.Load() != 2 {
		t.Fatalf("retry through the adapter: status %d, replayed %q, ran %d", w.Code, w.Header().Get("Idempotent-Replayed"), le.ran.Load())
	}
}

// A context kept past the answer finds no transaction: none begins after
// the engine has ended the request's.
func TestDurableModeNeverBeginsAfterTheAnswer(t *testing.T) {
	le := newLooseEngine(t)
	le.flag(t)
	if w := le.post(t, "leak", "leak"); w.Code != http.StatusCreated {
		t.Fatalf("status %d, body %s", w.Code, w.Body)
	}
	if _, ok := idem.TxFrom[string](le.leaked); ok {
		t.Fatal("TxFrom found a transaction after the request was answered")
	}
	if _, err := idem.TxFor[string](le.leaked, "createTransfer"); !errors.Is(err, idem.ErrNoTx) {
		t.Fatalf("TxFor after the answer: %v, want ErrNoTx", err)
	}
	if n := le.store.begins.Load(); n != 0 {
		t.Fatalf("%d transactions began after the answer", n)
	}
}

// A transaction that cannot begin when the handler asks for it: the
// adapter answers 503 store-unavailable without running the handler and
// the key is released, so a retry runs; TxFor's error says why.
func TestDurableModeBeginFailure(t *testing.T) {
	le := newLooseEngine(t)
	le.flag(t)
	down := errors.New("database down")
	le.store.fail.Store(&down)
	w := le.post(t, "k", "adapter")
	expect(t, w, http.StatusServiceUnavailable, problem.StoreUnavailable)
	if ra := w.Header().Get("Retry-After"); ra == "" {
		t.Error("503 without Retry-After")
	}
	if le.ran.Load() != 0 {
		t.Fatal("the adapter ran its handler without a transaction")
	}
	w = le.post(t, "s", "strict")
	if w.Code != http.StatusInternalServerError || !errors.Is(le.strictErr, idem.ErrNoTx) || !errors.Is(le.strictErr, down) {
		t.Fatalf("TxFor: status %d, error %v; want ErrNoTx wrapping %v", w.Code, le.strictErr, down)
	}
	le.store.fail.Store(nil)
	for _, key := range []string{"k", "s"} {
		mode := map[string]string{"k": "adapter", "s": "strict"}[key]
		if w := le.post(t, key, mode); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry of %s once the store is back: status %d, replayed %q; want a fresh 201", key, w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	}
}

// A key's completion that fails after the handler's transaction committed
// leaves the handler's writes durable: the client gets the handler's
// answer, not a 503 saying the request was not processed, and the key
// stays held (it fails closed once its lease ends), so a retry does not
// run the handler again.
func TestDurableModeCompletionFailsAfterTheCommit(t *testing.T) {
	le := newLooseEngine(t)
	le.flag(t)
	lost := errors.New("completion lost")
	le.store.completeFail.Store(&lost)
	w := le.post(t, "c", "adapter")
	if w.Code != http.StatusCreated || le.ran.Load() != 1 {
		t.Fatalf("status %d, body %s, handler ran %d times; want the handler's 201", w.Code, w.Body, le.ran.Load())
	}
	le.store.completeFail.Store(nil)
	expect(t, le.post(t, "c", "adapter"), http.StatusConflict, problem.InProgress)
	if le.ran.Load() != 1 {
		t.Fatalf("a retry ran the handler again (%d runs)", le.ran.Load())
	}
}

// A handler that answers an error before it reaches its transaction (a
// strict server refusing a body it cannot decode) does not switch its
// operation to durable mode: any client could otherwise do it with one bad
// request. The next request through the adapter still gets the claim's
// own transaction, and no plain one begins.
func TestAnErrorAnswerDoesNotSwitchToDurableMode(t *testing.T) {
	le := newLooseEngine(t)
	if w := le.post(t, "bad", "reject"); w.Code != http.StatusBadRequest {
		t.Fatalf("rejected request: status %d, body %s", w.Code, w.Body)
	}
	if w := le.post(t, "good", "adapter"); w.Code != http.StatusCreated {
		t.Fatalf("next request: status %d, body %s", w.Code, w.Body)
	}
	if n := le.store.begins.Load(); n != 0 {
		t.Fatalf("%d plain transactions began: one error answer switched the operation to durable mode", n)
	}
}

// The problems TxHandler answers carry the engine's ProblemBase, as every
// other problem of the engine does.
func TestTxHandlerProblemsUseTheProblemBase(t *testing.T) {
	p := transferPolicy()
	p.Transactional = true
	const base = "https://errors.example.test/idempotency/"
	e := newEngine(t, idem.Config{Store: &txStore{memstore.New()}, Policies: []idem.Policy{p}, ProblemBase: base})
	// Mounted for another operation: the request was protected as
	// createTransfer, so the adapter refuses it.
	h := e.Middleware(idem.TxHandler("anotherOperation", func(w http.ResponseWriter, r *http.Request, tx string) {
		t.Error("the handler ran")
	}))
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `"type":"`+base+problem.TransactionMissing+`"`) {
		t.Fatalf("status %d, body %s; want 500 with a type under %s", w.Code, w.Body, base)
	}
}
