package sqliteoutbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Records that wait together for the write turn, behind a request's
// transaction, are written together once it ends, each with its own
// outcome: the record of an effect no longer in the table is
// idemoutbox.ErrGone, and the others are recorded.
func TestRecordsWaitingTogetherKeepTheirOutcomes(t *testing.T) {
	inst := open(t, newDB(t), 1<<10)
	ctx := context.Background()
	stageRaw(t, inst.Store.(*sqlitestore.Store), 8)
	ms, err := inst.Outbox.Claim(ctx, 8, time.Minute, "runner")
	if err != nil || len(ms) != 8 {
		t.Fatalf("Claim = %d effects, %v", len(ms), err)
	}
	release, err := inst.Block(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone := ms[3]
	gone.ID = 1 << 40
	ms[3] = gone
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { _, errs[i] = inst.Outbox.Delivered(ctx, m) })
	}
	time.Sleep(100 * time.Millisecond)
	release()
	wg.Wait()
	for i, err := range errs {
		if want := i == 3; errors.Is(err, idemoutbox.ErrGone) != want || (!want && err != nil) {
			t.Errorf("record %d = %v, want ErrGone %v", i, err, want)
		}
	}
	delivered, err := inst.Outbox.List(ctx, idemoutbox.Query{States: []idemoutbox.State{idemoutbox.StateDelivered}})
	if err != nil || len(delivered) != 7 {
		t.Errorf("%d effects delivered, %v; want 7", len(delivered), err)
	}
}
