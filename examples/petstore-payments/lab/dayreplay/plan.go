// Package dayreplay builds a deterministic synthetic day of client traffic,
// replays it against a running payments server (or one it starts and kills
// at random moments), and audits the resulting state over the HTTP API.
package dayreplay

import (
	"fmt"
	"math/rand/v2"
)

// plannedAccount is an account the day opens.
type plannedAccount struct {
	tenant  int
	owner   string
	initial int64
	key     string
}

// plannedTransfer is one transfer a client means to make once.
type plannedTransfer struct {
	tenant   int
	from, to int // indexes into the tenant's accounts
	amount   int64
	key      string
	// twin: the client sends two copies at once (a double-click, a proxy
	// retrying on its own).
	twin bool
	// change: after its answer, the client sends the same key again with a
	// different amount (a client bug the server must refuse).
	change bool
}

// plan is the whole day, a pure function of the seed and the sizes.
type plan struct {
	accounts  [][]plannedAccount // per tenant
	transfers []plannedTransfer
}

func newPlan(seed uint64, tenants, accountsPerTenant, transfers int) plan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var p plan
	for t := range tenants {
		var accts []plannedAccount
		for a := range accountsPerTenant {
			accts = append(accts, plannedAccount{
				tenant:  t,
				owner:   fmt.Sprintf("day%d-t%d-a%d", seed, t, a),
				initial: 50_000 + rng.Int64N(50_000),
				key:     fmt.Sprintf("day%d-acct-%d-%d", seed, t, a),
			})
		}
		p.accounts = append(p.accounts, accts)
	}
	for i := range transfers {
		t := rng.IntN(tenants)
		from := rng.IntN(accountsPerTenant)
		to := (from + 1 + rng.IntN(accountsPerTenant-1)) % accountsPerTenant
		p.transfers = append(p.transfers, plannedTransfer{
			tenant: t,
			from:   from,
			to:     to,
			amount: 1 + rng.Int64N(500),
			key:    fmt.Sprintf("day%d-tr-%d", seed, i),
			twin:   rng.Float64() < 0.05,
			change: rng.Float64() < 0.03,
		})
	}
	return p
}
