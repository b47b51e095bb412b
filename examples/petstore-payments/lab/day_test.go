package lab_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/dayreplay"
	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// TestDayReplay plays a small day of timing-out, retrying, double-sending
// clients against real server processes on PostgreSQL, and audits it.
func TestDayReplay(t *testing.T) {
	t.Parallel()

	t.Run("PostgresOn", func(t *testing.T) {
		t.Parallel()
		s := bins.StartLab(t, labtest.PostgresURL(t), "--chaos-delay", labtest.DayChaosDelay)
		rep := labtest.PlayDay(t, labtest.SmallDay(t, s.URL))
		// Without retries the zeros below would prove nothing.
		if rep.Retries == 0 {
			t.Errorf("no request was retried; the day did not exercise idempotency")
		}
		labtest.CheckSafe(t, rep)
	})

	t.Run("PostgresOff", func(t *testing.T) {
		t.Parallel()
		s := bins.StartLab(t, labtest.PostgresURL(t), "--chaos-delay", labtest.DayChaosDelay, "--idempotency=off")
		rep := labtest.PlayDay(t, labtest.SmallDay(t, s.URL))
		// The same day without the layer must show the damage, or the
		// audit of the other subtests could be blind to it.
		if rep.Duplicates == 0 {
			t.Errorf("no duplicate transfer without idempotency (%d retries); the audit cannot see duplicates or the day does not provoke them", rep.Retries)
		}
		if rep.WronglyAccepted == 0 {
			t.Errorf("no amount change accepted without idempotency (0 of %d)", rep.AmountChanges)
		}
		if rep.Lost != 0 {
			t.Errorf("%d acknowledged transfers are missing, want 0", rep.Lost)
		}
		if !rep.Conserved {
			t.Errorf("money was not conserved: %s", strings.Join(rep.Problems, "; "))
		}
	})

	// SQLite runs one writer at a time, through the pause too: requests
	// queue behind each other, and with the short timeout and four clients
	// of the other subtests the retries would crowd out the day. With two
	// clients and the default timeout, the wait behind the other client's
	// pause still makes requests time out. It needs no PostgreSQL.
	t.Run("SQLiteOn", func(t *testing.T) {
		t.Parallel()
		s := bins.StartLab(t, labtest.SQLiteURL(t), "--chaos-delay", labtest.DayChaosDelay)
		c := labtest.SmallDay(t, s.URL)
		c.Timeout = dayreplay.DefaultConfig().Timeout
		c.Concurrency = 2
		rep := labtest.PlayDay(t, c)
		if rep.Retries == 0 {
			t.Errorf("no request was retried; the day did not exercise idempotency")
		}
		labtest.CheckSafe(t, rep)
	})

	t.Run("PostgresCrash", func(t *testing.T) {
		t.Parallel()
		c := labtest.SmallDay(t, "")
		c.Crash = true
		c.ServerBin = bins.Lab
		c.DatabaseURL = labtest.PostgresURL(t)
		c.ServerArgs = []string{"--chaos-delay=" + labtest.DayChaosDelay}
		c.KillEvery = time.Second
		rep := labtest.PlayDay(t, c)
		if rep.Kills == 0 {
			t.Errorf("the server was never killed; the day did not test crashes")
		}
		labtest.CheckSafe(t, rep)
	})
}
