package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"net/url"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/problem"
)

// verdict is what admission decided about a request.
type verdict int

const (
	// admitted: the request carries a valid key and has a fingerprint;
	// its claim is next.
	admitted verdict = iota
	// keyless: the request carries no key; noKey answers it.
	keyless
	// refused: the request is refused, before any claim, with a problem.
	refused
	// gone: the client hung up while its body was read or fingerprinted,
	// which stopped there; serve answers it as gone (gone.go), and
	// nothing is claimed.
	gone
)

// admit reads what a claim needs: the tenant, the key, the body and the
// fingerprint. It neither touches the store nor answers; the claim it
// returns carries the key and fingerprint as the store keeps them.
func (e *Engine) admit(r *http.Request, q *request, params map[string]string, prefix []string) (idemstore.Claim, verdict, Problem) {
	op := q.op
	tenant, ok := e.tenant(r)
	if !ok || tenant == "" {
		return idemstore.Claim{}, refused, e.answer(problem.TenantNotResolved)
	}
	q.tenant, q.event.Tenant = tenant, tenant

	// The query string costs allocations to parse: it is parsed once, and
	// only for a policy that reads its key or fingerprint from it.
	var query url.Values
	if op.Key.In == key.InQuery || len(op.Fingerprint.Query) > 0 {
		query = r.URL.Query()
	}

	k, v, p := e.keyBeforeBody(r, op, query)
	if v != admitted {
		return idemstore.Claim{}, v, p
	}
	sum, k, v, p := e.sumBody(r, op, params, query, k)
	if v != admitted {
		return idemstore.Claim{}, v, p
	}
	if len(prefix) > 0 {
		sum = withPrefix(sum, prefix)
	}
	return e.newClaim(q, k, &sum), admitted, Problem{}
}

// keyBeforeBody reads a header or query key before the body is read, so
// that a keyless request on an operation whose key is optional passes
// through untouched, its body streamed to the handler. A body key is read
// with the fingerprint (sumBody).
func (e *Engine) keyBeforeBody(r *http.Request, op *operation, query url.Values) (string, verdict, Problem) {
	if op.Key.In == key.InBody {
		return "", admitted, Problem{}
	}
	k, present, err := readKey(r, op, query)
	switch {
	case err != nil:
		return "", refused, e.keyProblem(op, err)
	case !present:
		return "", keyless, Problem{}
	}
	return k, admitted, Problem{}
}

// sumBody reads the body and computes the fingerprint, and with it the
// key k when the body holds it.
func (e *Engine) sumBody(r *http.Request, op *operation, params map[string]string, query url.Values, k string) ([32]byte, string, verdict, Problem) {
	in, p, ok := e.readInput(r, op, params, query)
	if !ok {
		return [32]byte{}, "", bodyRefused(r), p
	}
	if op.Key.In == key.InBody {
		sum, k, v, p := e.sumWithKey(r, op, in)
		if v == refused {
			v = bodyRefused(r)
		}
		return sum, k, v, p
	}
	sum, err := op.fingerprint.SumContext(r.Context(), in)
	if err != nil {
		return sum, "", bodyRefused(r), e.bodyProblem(op, err)
	}
	return sum, k, admitted, Problem{}
}

// bodyRefused is the verdict on a request whose body could not be read or
// fingerprinted: refused, unless its client has hung up. Reading stops
// then, and the request is one whose client is gone.
func bodyRefused(r *http.Request) verdict {
	if r.Context().Err() != nil {
		return gone
	}
	return refused
}

// readKey reads a header key, or a query key from query, r's parsed query
// string; a body key comes with the fingerprint (sumWithKey).
func readKey(r *http.Request, op *operation, query url.Values) (string, bool, error) {
	switch op.Key.In {
	case key.InQuery:
		return key.FromQuery(query, op.Key.Name, op.KeyMaxLength)
	default:
		return key.FromHeader(r.Header, op.Key.Name, op.KeyMaxLength)
	}
}

// sumWithKey computes the fingerprint of a request whose key is in its
// body, and reads the key in the same parse. A body that cannot be read is
// at fault before any key in it.
func (e *Engine) sumWithKey(r *http.Request, op *operation, in fingerprint.Input) ([32]byte, string, verdict, Problem) {
	sum, v, found, err := op.fingerprint.SumLookupContext(r.Context(), in, op.Key.Name)
	if err != nil {
		return sum, "", refused, e.bodyProblem(op, err)
	}
	k, present, err := key.FromBodyValue(v, found, op.Key.Name, op.KeyMaxLength)
	switch {
	case err != nil:
		return sum, "", refused, e.keyProblem(op, err)
	case !present:
		return sum, "", keyless, Problem{}
	}
	return sum, k, admitted, Problem{}
}

// withPrefix folds a mount prefix's segments into a request's fingerprint,
// each one length-prefixed so that no two prefixes fold alike.
func withPrefix(sum [32]byte, prefix []string) [32]byte {
	h := sha256.New()
	h.Write(sum[:])
	var n [binary.MaxVarintLen64]byte
	for _, s := range prefix {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// keyProblem answers a key that breaks the rules of docs/semantics.md §2.
func (e *Engine) keyProblem(op *operation, err error) Problem {
	return e.answer(problem.KeyInvalid, err.Error(), op.KeyMaxLength)
}
