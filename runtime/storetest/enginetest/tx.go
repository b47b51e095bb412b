package enginetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// RunTx runs the engine's transactional scenarios against target, each in
// a subtest of its own on a fresh store: concurrent duplicates, a
// handler's 503 and a handler's panic (both roll back its write and
// release the key), a handler that outlives its lease (its write is rolled
// back, its commit fenced, and a retry runs once), and a handler that
// writes around its transaction (durable mode: its writes never wait for
// its own request, and a crash fails closed, in the process that saw it
// and after a restart). The handlers behind the engine are
// idem.TxHandler[Tx] and a plain handler that takes its transaction with
// idem.TxFrom[Tx], so the store's Tx.Driver must return a Tx, the value
// Instance.Write and Instance.Count work with.
func RunTx[Tx any](t *testing.T, target storetest.Target) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, e *txEngine[Tx])
	}{
		{"ConcurrentDuplicates", txDuplicates[Tx]},
		{"UnavailableRollsBackAndReleases", txUnavailable[Tx]},
		{"PanicRollsBackAndReleases", txPanic[Tx]},
		{"HandlerOutlivesItsLease", txOutlivesLease[Tx]},
		{"DurableMode", txDurable[Tx]},
		{"DurableModeAfterARestart", txDurableAfterRestart[Tx]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, serveTx[Tx](t, target))
		})
	}
}

// txEngine is a fresh transactional store and an engine serving the
// scenarios' routes in front of it.
type txEngine[Tx any] struct {
	store idemstore.Transactor
	write func(ctx context.Context, tx Tx, marker string) error
	es    *EngineServer
	// effects reports how many committed business writes record key.
	effects func(key string) int
	// sleeping hears from a handler that has begun to idle past its
	// lease, its claim held.
	sleeping chan struct{}
}

// slowLease is the lease of the route whose handler outlives it.
const slowLease = 300 * time.Millisecond

// payBody is every scenario's request body.
const payBody = `{"amount":2500,"currency":"EUR"}`

// serveTx opens a store of target and serves the scenarios' routes on an
// engine in front of it.
func serveTx[Tx any](t *testing.T, target storetest.Target) *txEngine[Tx] {
	t.Helper()
	in, store := storetest.OpenTx(t, target)
	e := &txEngine[Tx]{store: store, write: func(ctx context.Context, tx Tx, marker string) error {
		return in.Write(ctx, tx, marker)
	}, sleeping: make(chan struct{}, 1)}
	e.effects = func(key string) int {
		t.Helper()
		n, err := in.Count(context.Background(), key)
		if err != nil {
			t.Fatalf("count effects: %v", err)
		}
		return n
	}
	pay := func(w http.ResponseWriter, r *http.Request, tx Tx) {
		key := r.Header.Get("Idempotency-Key")
		if err := e.write(r.Context(), tx, key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch r.Header.Get("X-Mode") {
		case "unavailable":
			http.Error(w, "downstream unavailable", http.StatusServiceUnavailable)
			return
		case "panic":
			panic("handler failed after its write")
		case "sleep":
			// Idle inside the transaction well past the lease.
			select {
			case e.sleeping <- struct{}{}:
			default:
			}
			time.Sleep(5 * slowLease)
		default:
			time.Sleep(20 * time.Millisecond)
		}
		Created(w, key)
	}
	// Each route's adapter names its own operation: a TxHandler refuses a
	// request the engine protected as another one.
	mux := http.NewServeMux()
	mux.Handle("POST /payments", idem.TxHandler("createPayment", pay))
	mux.Handle("POST /slow-payments", idem.TxHandler("createSlowPayment", pay))
	mux.HandleFunc("POST /loose-payments", func(w http.ResponseWriter, r *http.Request) {
		looseHandler(w, r, store, e.write)
	})
	e.es = ServeEngine(t, store, mux,
		EnginePolicy("createPayment", "/payments", time.Minute, idemstore.Takeover, true),
		EnginePolicy("createSlowPayment", "/slow-payments", slowLease, idemstore.Takeover, true),
		EnginePolicy("createLoosePayment", "/loose-payments", time.Minute, idemstore.Takeover, true))
	return e
}

func txDuplicates[Tx any](t *testing.T, e *txEngine[Tx]) {
	const n = 16
	answers := make([]Answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = e.es.Post("/payments", "dup", payBody)
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var orig *Answer
	for i, a := range answers {
		if a.Status == http.StatusCreated && !a.Replayed() {
			if orig != nil {
				t.Fatalf("two executed answers: %v and %v", *orig, a)
			}
			orig = &answers[i]
		}
	}
	if orig == nil {
		t.Fatalf("no executed answer among %v", answers)
	}
	var conflicts, replays int
	for i, a := range answers {
		switch {
		case &answers[i] == orig:
		case a.Status == http.StatusConflict:
			conflicts++
			if err := CheckProblem(a, http.StatusConflict, problem.InProgress, true); err != nil {
				t.Error(err)
			}
		default:
			replays++
			if err := CheckReplay(a, *orig); err != nil {
				t.Error(err)
			}
		}
	}
	t.Logf("16 duplicates: 1 executed, %d in progress, %d replayed", conflicts, replays)
	if err := CheckReplay(e.es.MustPost(t, "/payments", "dup", payBody), *orig); err != nil {
		t.Errorf("retry after the storm: %v", err)
	}
	if got := e.effects("dup"); got != 1 {
		t.Errorf("effects = %d, want exactly 1", got)
	}
	if got := e.es.RunsOf("dup"); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
}

func txUnavailable[Tx any](t *testing.T, e *txEngine[Tx]) {
	a := e.es.MustPost(t, "/payments", "unavail", payBody, "X-Mode", "unavailable")
	if a.Status != http.StatusServiceUnavailable || a.Replayed() {
		t.Fatalf("first attempt: %v, want the handler's own 503", a)
	}
	if got := e.effects("unavail"); got != 0 {
		t.Fatalf("effects after a 503 = %d, want 0 (rolled back)", got)
	}
	retry := e.es.MustPost(t, "/payments", "unavail", payBody)
	if retry.Status != http.StatusCreated || retry.Replayed() {
		t.Fatalf("retry: %v, want a fresh 201", retry)
	}
	if err := CheckReplay(e.es.MustPost(t, "/payments", "unavail", payBody), retry); err != nil {
		t.Error(err)
	}
	if got := e.effects("unavail"); got != 1 {
		t.Errorf("effects = %d, want exactly 1", got)
	}
	if got := e.es.RunsOf("unavail"); got != 2 {
		t.Errorf("handler ran %d times, want 2 (the 503 and the retry)", got)
	}
}

func txPanic[Tx any](t *testing.T, e *txEngine[Tx]) {
	a := e.es.MustPost(t, "/payments", "boom", payBody, "X-Mode", "panic")
	if err := CheckProblem(a, http.StatusInternalServerError, problem.HandlerFailed, false); err != nil {
		t.Fatal(err)
	}
	if got := e.effects("boom"); got != 0 {
		t.Fatalf("effects after a panic = %d, want 0 (rolled back)", got)
	}
	retry := e.es.MustPost(t, "/payments", "boom", payBody)
	if retry.Status != http.StatusCreated || retry.Replayed() {
		t.Fatalf("retry after the panic: %v, want a fresh 201", retry)
	}
	if got := e.effects("boom"); got != 1 {
		t.Errorf("effects = %d, want exactly 1", got)
	}
}

// The store ends the transaction of a handler that idles past its
// lease. That request answers 409 request-in-progress (its commit is
// fenced, so its own 201 is discarded); its write is gone; a retry
// takes the key over, runs once, and its answer is what every later
// retry replays.
func txOutlivesLease[Tx any](t *testing.T, e *txEngine[Tx]) {
	type result struct {
		a   Answer
		err error
	}
	slow := make(chan result, 1)
	began := time.Now()
	go func() {
		a, err := e.es.Post("/slow-payments", "sleepy", payBody, "X-Mode", "sleep")
		slow <- result{a, err}
	}()
	// While the lease runs, a retry meets the claim in flight. After
	// it, the key is free again, while the first handler still sleeps.
	var fresh *Answer
	// The retries begin once the first request's handler runs, its claim
	// held: on a loaded machine the first request can reach its claim
	// later than a retry sent after a fixed pause would.
	select {
	case <-e.sleeping:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request's handler did not begin within 10 s")
	}
	for fresh == nil && time.Since(began) < 10*time.Second {
		sent := time.Since(began)
		a := e.es.MustPost(t, "/slow-payments", "sleepy", payBody)
		switch {
		case a.Status == http.StatusCreated && !a.Replayed():
			if time.Since(began) < slowLease {
				t.Fatalf("retry ran before the first claim's lease ended: %v", a)
			}
			fresh = &a
		case a.Status == http.StatusCreated:
			t.Fatalf("retry replayed %v before any retry ran: the stale handler's answer was stored", a)
		default:
			if err := CheckProblem(a, http.StatusConflict, problem.InProgress, true); err != nil {
				t.Fatalf("retry sent %v after the first claim: %v", sent.Round(time.Millisecond), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if fresh == nil {
		t.Fatal("no retry ran within 10s")
	}
	t.Logf("retry ran %v after the first claim (lease %v)", time.Since(began).Round(time.Millisecond), slowLease)
	r := <-slow
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := CheckProblem(r.a, http.StatusConflict, problem.InProgress, true); err != nil {
		t.Errorf("the request that outlived its lease: %v", err)
	}
	if err := CheckReplay(e.es.MustPost(t, "/slow-payments", "sleepy", payBody), *fresh); err != nil {
		t.Errorf("retry after both ended: %v", err)
	}
	if got := e.effects("sleepy"); got != 1 {
		t.Errorf("effects = %d, want exactly 1 (the stale write rolled back)", got)
	}
	if got := e.es.RunsOf("sleepy"); got != 2 {
		t.Errorf("handler ran %d times, want 2", got)
	}
}

// A handler mounted as a plain http.Handler writes around its
// transaction. Its first request, which writes nothing, tells the
// engine so; from then on each claim commits before the handler runs
// and fails closed, and the handler's transaction begins only when the
// handler asks for it. One begun up front would hold what the store's
// Begin takes (on SQLite the database's only write lock), and a write
// the handler makes on a connection of its own would wait for its own
// request until the store gave up.
func txDurable[Tx any](t *testing.T, e *txEngine[Tx]) {
	flag := e.es.MustPost(t, "/loose-payments", "flag", payBody, "X-Mode", "idle")
	if flag.Status != http.StatusCreated {
		t.Fatalf("the request that shows the handler does not take its transaction: %v", flag)
	}
	for _, mode := range []string{"own", "tx"} {
		key := "durable-" + mode
		a := e.es.MustPost(t, "/loose-payments", key, payBody, "X-Mode", mode)
		if a.Status != http.StatusCreated || a.Replayed() {
			t.Fatalf("%s: %v, want a fresh 201", key, a)
		}
		if err := CheckReplay(e.es.MustPost(t, "/loose-payments", key, payBody, "X-Mode", mode), a); err != nil {
			t.Errorf("%s: retry: %v", key, err)
		}
		if got := e.effects(key); got != 1 {
			t.Errorf("%s: effects = %d, want exactly 1", key, got)
		}
		if got := e.es.RunsOf(key); got != 1 {
			t.Errorf("%s: handler ran %d times, want 1", key, got)
		}
	}
	// A handler that dies after writing on its own connection leaves
	// the key indeterminate, never free for a retry that writes again.
	a := e.es.MustPost(t, "/loose-payments", "durable-crash", payBody, "X-Mode", "own-panic")
	if err := CheckProblem(a, http.StatusInternalServerError, problem.HandlerFailed, false); err != nil {
		t.Fatal(err)
	}
	retry := e.es.MustPost(t, "/loose-payments", "durable-crash", payBody, "X-Mode", "own")
	if err := CheckProblem(retry, http.StatusConflict, problem.OutcomeUnknown, false); err != nil {
		t.Errorf("retry after the crash: %v", err)
	}
	if got := e.effects("durable-crash"); got != 1 {
		t.Errorf("effects after the crash and its retry = %d, want 1", got)
	}
}

// txDurableAfterRestart: a durable-mode request writes around its
// transaction and its process dies before it answers (here its handler
// hangs past the lease, which the store cannot tell apart). Durable mode
// lives in the process that saw the handler write around its transaction;
// the process that meets the retry, restarted or another replica, has not
// seen it and claims in a transaction with takeover. The key must still
// fail closed, or the retry writes a second time.
func txDurableAfterRestart[Tx any](t *testing.T, e *txEngine[Tx]) {
	store, write, effects := e.store, e.write, e.effects
	const lease = 300 * time.Millisecond
	hung := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Mode") != "own-hang" {
			looseHandler(w, r, store, write)
			return
		}
		if err := writeOwn(r.Context(), store, write, r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		<-hung
		Created(w, r.Header.Get("Idempotency-Key"))
	})
	policy := EnginePolicy("createLatePayment", "/late-payments", lease, idemstore.Takeover, true)
	before := ServeEngine(t, store, handler, policy)
	if a := before.MustPost(t, "/late-payments", "late-flag", payBody, "X-Mode", "idle"); a.Status != http.StatusCreated {
		t.Fatalf("the request that shows the handler does not take its transaction: %v", a)
	}
	dead := make(chan error, 1)
	go func() {
		_, err := before.Post("/late-payments", "late-crash", payBody, "X-Mode", "own-hang")
		dead <- err
	}()
	defer func() {
		close(hung)
		if err := <-dead; err != nil {
			t.Errorf("the hung request: %v", err)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); effects("late-crash") == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the durable-mode request made no write within 10s")
		}
	}
	time.Sleep(lease + 200*time.Millisecond)

	after := ServeEngine(t, store, handler, policy)
	retry := after.MustPost(t, "/late-payments", "late-crash", payBody, "X-Mode", "own")
	if err := CheckProblem(retry, http.StatusConflict, problem.OutcomeUnknown, false); err != nil {
		t.Errorf("retry in a process that has not seen durable mode: %v", err)
	}
	if got := effects("late-crash"); got != 1 {
		t.Errorf("effects after the retry = %d, want 1", got)
	}
}

// looseHandler is a transactional operation's handler mounted without its
// adapter, by its X-Mode: "idle" writes nothing, "own" writes in a
// transaction of its own from store's Begin, as a handler writing through
// its pool does, "own-panic" does so and then panics, and "tx" takes the
// request's transaction with idem.TxFrom and writes in it.
func looseHandler[Tx any](w http.ResponseWriter, r *http.Request, store idemstore.Transactor,
	write func(ctx context.Context, tx Tx, marker string) error) {
	ctx, key := r.Context(), r.Header.Get("Idempotency-Key")
	var err error
	switch mode := r.Header.Get("X-Mode"); mode {
	case "own", "own-panic":
		err = writeOwn(ctx, store, write, key)
		if err == nil && mode == "own-panic" {
			panic("handler failed after its write")
		}
	case "tx":
		tx, ok := idem.TxFrom[Tx](ctx)
		if !ok {
			err = errors.New("no transaction")
			break
		}
		err = write(ctx, tx, key)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	Created(w, key)
}

// writeOwn writes marker in a transaction of its own, outside the
// request's.
func writeOwn[Tx any](ctx context.Context, store idemstore.Transactor,
	write func(ctx context.Context, tx Tx, marker string) error, marker string) error {
	own, err := store.Begin(ctx, time.Minute)
	if err != nil {
		return err
	}
	tx, ok := own.Driver().(Tx)
	if !ok {
		return errors.Join(fmt.Errorf("Driver() is %T", own.Driver()), own.Rollback(ctx))
	}
	if err := write(ctx, tx, marker); err != nil {
		return errors.Join(err, own.Rollback(ctx))
	}
	return own.Commit(ctx, idemstore.Response{})
}
