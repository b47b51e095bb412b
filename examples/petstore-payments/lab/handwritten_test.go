package lab_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// The hand-written key table that the benchmark compares idemgen with is
// itself idempotent, or the comparison would flatter it: a retry replays
// the stored answer and moves the money once, concurrent duplicates wait
// for the first and replay it, keys are scoped by tenant, and a request
// without a key is refused.
func TestHandwrittenKeysAreIdempotent(t *testing.T) {
	t.Parallel()
	s := bins.StartLab(t, labtest.PostgresURL(t), "--idempotency=handwritten")
	c := labtest.NewClient(t, s, labtest.KeyAcme)
	from := c.CreateAccount("Ada", "EUR", 1000)
	to := c.CreateAccount("Bo", "EUR", 0)
	body := labtest.TransferBody(from, to, 100, "rent")

	first := c.Expect(201, "POST", "/transfers", "hw-1", body)
	again := c.Expect(201, "POST", "/transfers", "hw-1", body)
	if !bytes.Equal(again.Body, first.Body) || again.Header.Get("Location") != first.Header.Get("Location") {
		t.Fatalf("retry answered %s (Location %q), want the first answer %s (Location %q)",
			again, again.Header.Get("Location"), first, first.Header.Get("Location"))
	}
	if first.Header.Get("Idempotent-Replayed") != "" || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("Idempotent-Replayed: first %q, retry %q; want none, then true",
			first.Header.Get("Idempotent-Replayed"), again.Header.Get("Idempotent-Replayed"))
	}

	const duplicates = 8
	answers := make([]labtest.Response, duplicates)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = c.Must("POST", "/transfers", "hw-2", body) })
	}
	wg.Wait()
	for i, a := range answers {
		if a.Status != 201 || !bytes.Equal(a.Body, answers[0].Body) {
			t.Errorf("duplicate %d answered %s, want 201 and duplicate 0's %s", i, a, answers[0])
		}
	}

	if got := c.Balance(from); got != 800 {
		t.Errorf("from_account holds %d after two keys' transfers of 100, want 800", got)
	}
	if n := len(c.Transfers(from)); n != 2 {
		t.Errorf("%d transfers recorded for two keys, want 2", n)
	}

	other := labtest.NewClient(t, s, labtest.KeyGlobex)
	other.Expect(404, "POST", "/transfers", "hw-1", body)
	c.Expect(400, "POST", "/transfers", "", body)
}
