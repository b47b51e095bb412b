package idem

import (
	"context"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// RequestIdentity returns the identity of the key that protects the
// request of ctx, as its row is stored (the key kept as its HMAC under
// Config.Secrets), and false when ctx is not the context of a handler the
// engine protects with a key. It ties what a handler records elsewhere,
// such as the effects it stages in an outbox, to the key an operator
// inspects (idemadmin).
func RequestIdentity(ctx context.Context) (idemstore.Identity, bool) {
	a := appliedFrom(ctx)
	if a == nil || a.id.Key == "" {
		return idemstore.Identity{}, false
	}
	return a.id, true
}
