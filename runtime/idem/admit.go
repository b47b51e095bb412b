package idem

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

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
	// which stopped there. Its context stays done, so serve answers it
	// as it answers any client that left before its claim (clientGone).
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

	// A header or query key is looked at before the body is read, so that
	// a keyless request on an operation whose key is optional passes
	// through untouched, its body streamed to the handler.
	var k string
	if op.Key.In != key.InBody {
		var present bool
		var err error
		if k, present, err = readKey(r, op, query); err != nil {
			return idemstore.Claim{}, refused, e.keyProblem(op, err)
		}
		if !present {
			return idemstore.Claim{}, keyless, Problem{}
		}
	}

	in, p, ok := e.readInput(r, op, params, query)
	if !ok {
		return bodyRefused(r, p)
	}
	var sum [32]byte
	if op.Key.In == key.InBody {
		var v verdict
		if sum, k, v, p = e.sumWithKey(r, op, in); v == refused {
			return bodyRefused(r, p)
		} else if v != admitted {
			return idemstore.Claim{}, v, p
		}
	} else {
		var err error
		if sum, err = op.fingerprint.SumContext(r.Context(), in); err != nil {
			return bodyRefused(r, e.bodyProblem(op, err))
		}
	}
	if len(prefix) > 0 {
		sum = withPrefix(sum, prefix)
	}
	return e.newClaim(q, k, &sum), admitted, Problem{}
}

// bodyRefused refuses a request whose body could not be read or
// fingerprinted with p, unless its client has hung up: reading stops then,
// and the request is one whose client is gone.
func bodyRefused(r *http.Request, p Problem) (idemstore.Claim, verdict, Problem) {
	if r.Context().Err() != nil {
		return idemstore.Claim{}, gone, Problem{}
	}
	return idemstore.Claim{}, refused, p
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

// readInput reads the body (readBody) and what the fingerprint is computed
// over. The body is read as the media type the operation declares; a body
// of another kind is refused before the key is even looked for in it.
func (e *Engine) readInput(r *http.Request, op *operation, params map[string]string, query url.Values) (fingerprint.Input, Problem, bool) {
	body, p, ok := e.readBody(r)
	if !ok {
		return fingerprint.Input{}, p, false
	}
	mediaType, err := op.fingerprint.BodyMediaType(mediaTypeOf(r.Header.Get("Content-Type")), len(body) > 0)
	if err != nil {
		return fingerprint.Input{}, e.bodyProblem(op, err), false
	}
	return fingerprint.Input{MediaType: mediaType, Body: body, Path: params, Query: query}, Problem{}, true
}

// readBody reads the body once, within the limit, and hands the handler an
// intact copy. It stops reading once the request's context is done.
func (e *Engine) readBody(r *http.Request) ([]byte, Problem, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, Problem{}, true
	}
	body, err := readLimited(r.Context(), r.Body, e.maxBody, r.ContentLength)
	_ = r.Body.Close()
	if err != nil {
		return nil, e.answer(problem.BodyUnread), false
	}
	if int64(len(body)) > e.maxBody {
		return nil, e.answer(problem.BodyTooBig, e.maxBody), false
	}
	rb := &bodyCopy{}
	rb.Reset(body)
	r.Body = rb
	r.ContentLength = int64(len(body))
	return body, Problem{}, true
}

// firstRead bounds the buffer a body is first read into when its request
// declares its length: a client cannot make the engine allocate more than
// this up front by declaring a length it never sends.
const firstRead = 16 << 10

// readLimited reads src to its end, or to one byte past limit, and fails
// once ctx is done: a client that hung up mid-body is not waited for. A
// body of declared length (hint, -1 when unknown) is read into one buffer
// of its size, where io.ReadAll would start small and grow.
func readLimited(ctx context.Context, src io.Reader, limit, hint int64) ([]byte, error) {
	size := int64(512)
	if hint >= 0 {
		// One byte more than the body, so that the read that meets its
		// end needs no room to grow into.
		size = min(hint+1, limit+1, firstRead)
	}
	b := make([]byte, 0, size)
	for int64(len(b)) <= limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := b[len(b):cap(b)]
		if left := limit + 1 - int64(len(b)); int64(len(room)) > left {
			room = room[:left]
		}
		n, err := src.Read(room)
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// bodyCopy is the body the handler reads: the bytes the engine read, in
// one allocation where io.NopCloser(bytes.NewReader(…)) takes two.
type bodyCopy struct{ bytes.Reader }

// Close does nothing: the body is in memory.
func (*bodyCopy) Close() error { return nil }

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

// noKey answers a request without a key: a 400 when the policy requires
// one, otherwise the handler runs with no idempotency.
func (e *Engine) noKey(w http.ResponseWriter, r *http.Request, q *request, next http.Handler) {
	if q.op.Required {
		e.reject(w, q, e.answer(problem.KeyRequired, keyPlace(q.op.Key)))
		return
	}
	q.event.Outcome = OutcomeNoKey
	e.runUnprotected(w, r, q, next)
}

// keyProblem answers a key that breaks the rules of docs/semantics.md §2.
func (e *Engine) keyProblem(op *operation, err error) Problem {
	return e.answer(problem.KeyInvalid, err.Error(), op.KeyMaxLength)
}

// bodyProblem answers a body the engine cannot read: 415 for a media type
// it cannot fingerprint, 400 for a malformed body. Neither claims the key.
func (e *Engine) bodyProblem(op *operation, err error) Problem {
	if errors.Is(err, fingerprint.ErrMediaType) {
		takes := "application/json or application/x-www-form-urlencoded"
		if op.Fingerprint.MediaType != "" {
			takes = op.Fingerprint.MediaType
		}
		return e.answer(problem.MediaTypeUnsupported, takes)
	}
	why := strings.TrimPrefix(err.Error(), fingerprint.ErrBody.Error()+": ")
	return e.answer(problem.BodyMalformed, why)
}

func keyPlace(k KeySource) string {
	switch k.In {
	case key.InBody:
		return "the body field " + k.Name
	case key.InQuery:
		return "the query parameter " + k.Name
	default:
		return "the " + k.Name + " header"
	}
}
