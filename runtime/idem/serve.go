package idem

import (
	"net/http"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// request is one protected request on its way through the engine.
type request struct {
	op     *operation
	start  time.Time
	tenant string
	key    string // as stored; logged through keyLabel only
	// id is the identity the request's row is stored under; a sealed
	// response is bound to it.
	id idemstore.Identity
	// anchor and raw name the request for its effect keys and phases
	// (applied.effectAnchor): its tenant, scope and key as the effect
	// secret stores it (effectSecret), which no rotation of Config.Secrets
	// changes (docs/semantics.md §8.1), and its fingerprint as computed,
	// before any secret.
	anchor idemstore.Identity
	raw    [32]byte
	// sum is the fingerprint the request's claims carry.
	sum [32]byte
	// older are the request's claims under older secrets still in their
	// rotation window (Config.Secrets); nil in the common case.
	older []idemstore.Claim
	// applied is the request's mark of protection; it carries the
	// transaction to a transactional handler.
	applied *applied
	// mark is what applied points to once the handler is about to run
	// (Engine.mark).
	mark applied
	// rec captures the handler's response (newRecorder).
	rec recorder
	// metInFlight is the row of a request that met its key in flight and
	// waits for its answer (Config.DuplicateWait).
	metInFlight *idemstore.Record
	event       Event
}

// serve applies op's policy to one request: admission (admit.go), then by
// admission's verdict the keyed path (await.go, claim.go, run.go), the
// answer to a client gone (gone.go), a refusal, or the keyless path
// (keyless.go). prefix holds the decoded path segments in front of
// op's template when they may name a resource (Engine.Handler under a
// prefix other than BasePath); they enter the fingerprint.
func (e *Engine) serve(w http.ResponseWriter, r *http.Request, op *operation, params map[string]string, prefix []string, next http.Handler) {
	q := &request{op: op, start: time.Now()}
	q.event.Operation = op.OperationID
	defer e.observe(r.Context(), q)

	c, v, p := e.admit(r, q, params, prefix)
	switch v {
	case admitted:
		// A client that hung up since is answered as gone, and nothing
		// is claimed for it.
		if !e.clientGone(w, r, q) {
			e.serveKeyed(w, r, q, c, next)
		}
	case gone:
		e.gone(w, q, r.Context().Err())
	case refused:
		e.reject(w, q, p)
	case keyless:
		e.noKey(w, r, q, next)
	}
}
