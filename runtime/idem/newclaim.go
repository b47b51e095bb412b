package idem

import (
	"crypto/rand"
	"crypto/sha256"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// newClaim is the claim of q, admitted with key k and fingerprint sum.
// From here on the request knows its key only as the store keeps it:
// under Config.Secrets an HMAC (protect), so no log line can carry the key.
func (e *Engine) newClaim(q *request, k string, sum *[32]byte) idemstore.Claim {
	op := q.op
	// The claim's fingerprint lives in q, which the request allocates
	// anyway, rather than in an array of its own on the heap.
	q.sum = *sum
	c := idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: q.tenant, Scope: scopeOf(op.Policy), Key: k},
		Operation:     op.scopeID(),
		Fingerprint:   q.sum[:],
		Token:         rand.Text(),
		Lease:         op.Lease,
		TTL:           op.TTL,
		OnLeaseExpiry: op.OnLeaseExpiry,
	}
	q.anchor, q.raw = c.Identity, q.sum
	c, q.older = e.protect(op, c, &q.sum)
	q.id, q.key = c.Identity, c.Key
	q.anchor.Key = e.anchorKey(k, c.Key)
	return c
}

func scopeOf(p Policy) string {
	if p.Scope == ScopeTenant {
		return ""
	}
	return p.scopeID()
}

// scopeID is the operation name the policy's keys are stored under.
func (p Policy) scopeID() string {
	if p.ScopeID != "" {
		return p.ScopeID
	}
	return p.OperationID
}

// protect rewrites c's key and fingerprint (sum, rewritten in place) as
// the store keeps them under the newest secret, and returns the claims the
// same request would have made under older secrets (olderClaims). Without
// secrets c is returned as it is and there are no older claims.
func (e *Engine) protect(op *operation, c idemstore.Claim, sum *[sha256.Size]byte) (idemstore.Claim, []idemstore.Claim) {
	if len(e.secrets) == 0 {
		return c, nil
	}
	raw, k := *sum, c.Key
	*sum = e.secrets[0].Fingerprint(raw)
	c.Key = e.secrets[0].Key(k)
	return c, e.olderClaims(op, c, k, raw)
}

// olderClaims are the claims c's request would have made under each older
// secret still within op's window: rows written under one may live until
// SecretsRotatedAt + ttl + lease. k and raw are the key and the
// fingerprint in clear.
func (e *Engine) olderClaims(op *operation, c idemstore.Claim, k string, raw [sha256.Size]byte) []idemstore.Claim {
	if len(e.secrets) == 1 || (!e.rotatedAt.IsZero() && time.Since(e.rotatedAt) > op.TTL+op.Lease) {
		return nil
	}
	older := make([]idemstore.Claim, 0, len(e.secrets)-1)
	for i := range e.secrets[1:] {
		s := &e.secrets[i+1]
		o := c
		o.Key = s.Key(k)
		fp := s.Fingerprint(raw)
		o.Fingerprint = fp[:]
		older = append(older, o)
	}
	return older
}
