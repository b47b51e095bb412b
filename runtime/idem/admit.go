package idem

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/key"
)

// request is one protected request on its way through the engine.
type request struct {
	op     *operation
	start  time.Time
	tenant string
	key    string // as stored; logged through keyLabel only
	// id is the identity the request's row is stored under; a sealed
	// response is bound to it.
	id Identity
	// older are the request's claims under older secrets still in their
	// rotation window (Config.Secrets); nil in the common case.
	older []Claim
	// applied is the request's mark of protection; it carries the
	// transaction to a transactional handler.
	applied *applied
	event   Event
}

// serve applies op's policy. prefix holds the decoded path segments in
// front of op's template when they may name a resource (Engine.Handler
// under a prefix other than BasePath); they enter the fingerprint.
func (e *Engine) serve(w http.ResponseWriter, r *http.Request, op *operation, params map[string]string, prefix []string, next http.Handler) {
	q := &request{op: op, start: time.Now()}
	q.event.Operation = op.OperationID
	defer e.observe(r.Context(), q)

	tenant, ok := e.tenant(r)
	if !ok || tenant == "" {
		e.reject(w, q, e.problem(ProblemTenantUnresolved, http.StatusInternalServerError,
			"Tenant not resolved", "The server could not tell which tenant this request belongs to, so it did not run it. Contact support."))
		return
	}
	q.tenant, q.event.Tenant = tenant, tenant

	// The query string costs allocations to parse: it is parsed once, and
	// only for a policy that reads its key or fingerprint from it.
	var query url.Values
	if op.Key.In == KeyInQuery || len(op.Fingerprint.Query) > 0 {
		query = r.URL.Query()
	}

	// A header or query key is looked at before the body is read, so that
	// a keyless request on an operation whose key is optional passes
	// through untouched, its body streamed to the handler.
	var k string
	if op.Key.In != KeyInBody {
		key, present, err := e.key(r, op, query)
		if err != nil {
			e.reject(w, q, e.keyProblem(op, err))
			return
		}
		if !present {
			e.noKey(w, r, q, next)
			return
		}
		k = key
	}

	body, p, ok := e.readBody(r)
	if !ok {
		e.reject(w, q, p)
		return
	}
	mediaType := ""
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mediaType, _, _ = mime.ParseMediaType(ct)
	}
	// The body is read as the media type the operation declares; a body
	// of another kind is refused before the key is even looked for in it.
	mediaType, err := op.fingerprint.BodyMediaType(mediaType, len(body) > 0)
	if err != nil {
		e.reject(w, q, e.bodyProblem(op, err))
		return
	}

	in := fingerprint.Input{MediaType: mediaType, Body: body, Path: params, Query: query}
	var sum [32]byte
	if op.Key.In == KeyInBody {
		// One parse of the body yields both the key and the fingerprint.
		// A body that cannot be read is at fault before any key in it.
		var (
			v     []byte
			found bool
		)
		sum, v, found, err = op.fingerprint.SumLookup(in, op.Key.Name)
		if err != nil {
			e.reject(w, q, e.bodyProblem(op, err))
			return
		}
		key, present, err := key.FromBodyValue(v, found, op.Key.Name, op.KeyMaxLength)
		switch {
		case err != nil:
			e.reject(w, q, e.keyProblem(op, err))
			return
		case !present:
			e.noKey(w, r, q, next)
			return
		}
		k = key
	} else if sum, err = op.fingerprint.Sum(in); err != nil {
		e.reject(w, q, e.bodyProblem(op, err))
		return
	}
	if len(prefix) > 0 {
		sum = withPrefix(sum, prefix)
	}

	claim := Claim{
		Identity:      Identity{Tenant: tenant, Scope: scopeOf(op.Policy), Key: k},
		Operation:     op.scopeID(),
		Fingerprint:   sum[:],
		Token:         rand.Text(),
		Lease:         op.Lease,
		TTL:           op.TTL,
		OnLeaseExpiry: op.OnLeaseExpiry,
	}
	// From here on the request knows its key only as the store keeps it:
	// under Config.Secrets an HMAC, so no log line can carry the key.
	claim, q.older = e.protect(op, claim, &sum)
	q.id, q.key = claim.Identity, claim.Key
	if op.Transactional {
		e.serveTx(w, r, q, claim, next)
		return
	}
	e.serveClaim(w, r, q, claim, next)
}

// noKey answers a request without a key: a 400 when the policy requires
// one, otherwise the handler runs with no idempotency.
func (e *Engine) noKey(w http.ResponseWriter, r *http.Request, q *request, next http.Handler) {
	if q.op.Required {
		e.reject(w, q, e.problem(ProblemMissingKey, http.StatusBadRequest, "Idempotency key required",
			"This operation requires an idempotency key in "+keyPlace(q.op.Key)+". Send a unique key per logical request and reuse it on retries."))
		return
	}
	q.event.Outcome = OutcomeNoKey
	e.runUnprotected(w, r, q, next)
}

// keyProblem answers a key that breaks the rules of SEMANTICS §2.
func (e *Engine) keyProblem(op *operation, err error) Problem {
	return e.problem(ProblemInvalidKey, http.StatusBadRequest, "Invalid idempotency key",
		err.Error()+". Send a key of 1 to "+strconv.Itoa(op.KeyMaxLength)+" visible ASCII characters.")
}

// bodyProblem answers a body the engine cannot read: 415 for a media type
// it cannot fingerprint, 400 for a malformed body. Neither claims the key.
func (e *Engine) bodyProblem(op *operation, err error) Problem {
	if errors.Is(err, fingerprint.ErrMediaType) {
		takes := "application/json or application/x-www-form-urlencoded"
		if op.Fingerprint.MediaType != "" {
			takes = op.Fingerprint.MediaType
		}
		return e.problem(ProblemUnsupportedMediaType, http.StatusUnsupportedMediaType, "Unsupported media type",
			"This operation takes a body of type "+takes+"; send it with that Content-Type. The idempotency key was not used.")
	}
	why := strings.TrimPrefix(err.Error(), fingerprint.ErrBody.Error()+": ")
	return e.problem(ProblemInvalidBody, http.StatusBadRequest, "Request body could not be read",
		"The request body is not well-formed ("+why+"). Fix it and retry; the idempotency key was not used.")
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

func keyPlace(k KeySource) string {
	switch k.In {
	case KeyInBody:
		return "the body field " + k.Name
	case KeyInQuery:
		return "the query parameter " + k.Name
	default:
		return "the " + k.Name + " header"
	}
}

// readBody reads the body once, within the limit, and hands the handler an
// intact copy.
func (e *Engine) readBody(r *http.Request) ([]byte, Problem, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, Problem{}, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, e.maxBody+1))
	_ = r.Body.Close()
	if err != nil {
		return nil, e.problem(ProblemInvalidBody, http.StatusBadRequest, "Request body could not be read",
			"The request body could not be read completely. Retry with the same idempotency key."), false
	}
	if int64(len(body)) > e.maxBody {
		return nil, e.problem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge, "Request body too large",
			"The request body is larger than "+strconv.FormatInt(e.maxBody, 10)+" bytes."), false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return body, Problem{}, true
}

// key reads a header key, or a query key from query, r's parsed query
// string; a body key comes with the fingerprint.
func (e *Engine) key(r *http.Request, op *operation, query url.Values) (string, bool, error) {
	switch op.Key.In {
	case KeyInQuery:
		return key.FromQuery(query, op.Key.Name, op.KeyMaxLength)
	default:
		return key.FromHeader(r.Header, op.Key.Name, op.KeyMaxLength)
	}
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
