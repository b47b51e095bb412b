package database

import (
	"context"
	"os"
	"strings"
	"testing"
)

// The PostgreSQL pool holds a connection for every request served at once,
// and a spare for readiness checks and the sweeper: a transfer keeps its
// connection through its whole handler, and a replay must not wait for
// one behind handlers it has nothing to do with. pool_max_conns in the
// URL still decides when given.
func TestPoolHoldsTheRequestsInFlight(t *testing.T) {
	base := os.Getenv("IDEMGEN_TEST_DATABASE_URL")
	if base == "" {
		t.Skip("IDEMGEN_TEST_DATABASE_URL is unset; set it to a PostgreSQL URL to open a pool")
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	for _, c := range []struct {
		url      string
		inFlight int
		want     int32
	}{
		{base, 16, 16 + spareConns},
		{base + sep + "pool_max_conns=3", 16, 3},
	} {
		db, err := Open(context.Background(), c.url, c.inFlight)
		if err != nil {
			t.Fatal(err)
		}
		got := db.Pool.Config().MaxConns
		db.Close()
		if got != c.want {
			t.Errorf("%d requests in flight, URL %s: a pool of %d connections, want %d", c.inFlight, Redact(c.url), got, c.want)
		}
	}
}
