// Package server is the payments service's HTTP layer: authentication, rate
// limiting, the idempotency layer's place in the chain, routing, request
// validation and the mapping of business failures to problem details.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
)

// TxHandlerFunc is a handler that writes inside a transaction.
type TxHandlerFunc func(w http.ResponseWriter, r *http.Request, db ledger.DB)

// TxMount turns a transactional handler into an http.Handler: with the
// idempotency layer it is the generated adapter (the key's completion and
// the handler's writes commit together); without it, PlainTx.
type TxMount func(operationID string, h TxHandlerFunc) http.Handler

// Config configures a Server.
type Config struct {
	// Ledger runs the business rules; Conn is the database outside
	// transactions, for the non-transactional operations and reads.
	Ledger *ledger.Ledger
	Conn   ledger.DB
	// Ready reports whether the database answers; /healthz calls it.
	Ready func(ctx context.Context) error
	// Keys maps each bearer API key to its tenant.
	Keys map[string]string
	// RateLimit is the per-tenant request rate per second; 0 is unlimited.
	RateLimit float64
	// AuthFailures is the number of failed authentications a client
	// address may make per minute, and in a burst; beyond it the address
	// is answered 429 until it has waited. 0 is unlimited.
	AuthFailures int
	// Idempotency is the idempotency middleware; nil runs without one.
	Idempotency func(http.Handler) http.Handler
	// Admission bounds the requests served at once (idemshed); nil admits
	// every request. It stands after authentication and rate limiting and
	// in front of the idempotency layer, so that a request it refuses has
	// claimed no key. It reads a request's body before the request takes
	// any capacity (idemshed does, within a bound on all the bodies it
	// holds): a client that sends its body slowly holds a connection, cut
	// off by the read timeout, but none of the capacity.
	Admission func(http.Handler) http.Handler
	// Tx mounts the transactional operations. When it is nil they run in
	// plain transactions from Begin, with no idempotency.
	Tx TxMount
	// Begin starts a plain transaction; used only when Tx is nil.
	Begin func(ctx context.Context) (*database.Tx, error)
	// Settle, when set, is called by the transfer handler after the
	// ledger's writes, in the request's transaction, for what the
	// transfer does outside the ledger (internal/payments). An error
	// wrapping ErrUnavailable is answered 503, any other 500; either
	// rolls the transfer back.
	Settle func(ctx context.Context, t ledger.Transfer) error
	// AfterWrites, when set, is called by each write handler after its
	// writes and before its answer: the lab's days pause there, so that
	// client timeouts and kills land where they hurt most.
	AfterWrites func()
	// ProblemBase prefixes every problem type name.
	ProblemBase string
	// MaxBodyBytes bounds request bodies.
	MaxBodyBytes int64
	Logger       *slog.Logger
}

// Server is the service's HTTP handler.
type Server struct {
	ledger      *ledger.Ledger
	conn        ledger.DB
	ready       func(ctx context.Context) error
	keys        keyring
	authFails   *failLimiter
	limits      *limiters
	settle      func(ctx context.Context, t ledger.Transfer) error
	afterWrites func()
	problemBase string
	maxBody     int64
	log         *slog.Logger
	api         *http.ServeMux
	handler     http.Handler
	// goneRuns counts the requests that reached a handler after their
	// client had hung up: work whose answer no one reads.
	goneRuns atomic.Int64
}

// The operation IDs of the spec's transactional operations.
const (
	OpCreateTransfer = "createTransfer"
	OpCreateAdoption = "createAdoption"
)

// New builds the server. The chain is authentication → rate limit →
// idempotency → router: the idempotency layer needs the tenant, and a 401 or
// 429 must never be recorded against a key.
func New(cfg Config) (*Server, error) {
	if cfg.Ledger == nil || cfg.Conn == nil || (cfg.Tx == nil && cfg.Begin == nil) {
		return nil, errors.New("server: Ledger, Conn, and Tx or Begin are required")
	}
	s := &Server{
		ledger:      cfg.Ledger,
		conn:        cfg.Conn,
		ready:       cfg.Ready,
		keys:        newKeyring(cfg.Keys),
		authFails:   newFailLimiter(cfg.AuthFailures),
		settle:      cfg.Settle,
		afterWrites: cfg.AfterWrites,
		problemBase: cfg.ProblemBase,
		maxBody:     cfg.MaxBodyBytes,
		log:         cfg.Logger,
	}
	if s.maxBody <= 0 {
		s.maxBody = 1 << 20
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.RateLimit > 0 {
		s.limits = &limiters{perSec: cfg.RateLimit, tenants: map[string]*rate.Limiter{}}
	}

	mount := cfg.Tx
	if mount == nil {
		mount = s.plainTx(cfg.Begin)
	}

	api := http.NewServeMux()
	api.HandleFunc("POST /accounts", s.createAccount)
	api.HandleFunc("GET /accounts", s.listAccounts)
	api.HandleFunc("GET /accounts/{account_id}", s.getAccount)
	api.HandleFunc("GET /accounts/{account_id}/transfers", s.listTransfers)
	api.Handle("POST /transfers", mount(OpCreateTransfer, s.createTransfer))
	api.HandleFunc("GET /transfers/{transfer_id}", s.getTransfer)
	api.HandleFunc("POST /pets", s.createPet)
	api.HandleFunc("GET /pets/{pet_id}", s.getPet)
	api.Handle("POST /pets/{pet_id}/adoptions", mount(OpCreateAdoption, s.createAdoption))
	api.HandleFunc("/", s.noRoute(api))

	var chain http.Handler = s.countGone(api)
	if cfg.Idempotency != nil {
		chain = cfg.Idempotency(chain)
	}
	if cfg.Admission != nil {
		chain = cfg.Admission(chain)
	}
	chain = s.authenticate(s.rateLimit(chain))

	s.api = api
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", s.healthz)
	root.Handle("/", chain)
	s.handler = root
	return s, nil
}

// Route says which handler of the API router, the one behind the
// idempotency middleware, serves r, and under which pattern: an
// idem.RouteLookup for Engine.CheckRoutes.
func (s *Server) Route(r *http.Request) (http.Handler, string) { return s.api.Handler(r) }

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.ready(ctx); err != nil {
			s.writeProblem(w, http.StatusServiceUnavailable, ProblemDatabaseUnavailable, "the database does not answer", 1)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// noRoute answers problem details where ServeMux would answer plain text:
// 405 for a known path with another method, else 404.
func (s *Server) noRoute(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if m == r.Method {
				continue
			}
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" {
				w.Header().Set("Allow", m)
				s.writeProblem(w, http.StatusMethodNotAllowed, ProblemMethodNotAllowed, r.Method+" is not served on "+r.URL.Path, 0)
				return
			}
		}
		s.writeProblem(w, http.StatusNotFound, ProblemNotFound, "no such route: "+r.URL.Path, 0)
	}
}

// wrote calls Config.AfterWrites, if any: a handler's writes are done, its
// answer not yet written.
func (s *Server) wrote() {
	if s.afterWrites != nil {
		s.afterWrites()
	}
}

// ErrUnavailable is wrapped by an error of Config.Settle when a service
// the transfer needs (the payment processor) did not answer: the request
// is answered 503 and rolled back, and its retry is safe.
var ErrUnavailable = errors.New("a service the request needs did not answer")

// fail answers err: a business failure with its problem type, a validation
// failure with 400, and anything else with a logged 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var v *errValidation
	var b *ledger.Error
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &v):
		s.writeProblem(w, http.StatusBadRequest, ProblemValidation, v.msg, 0)
	case errors.As(err, &tooBig):
		s.writeProblem(w, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge, "the request body is larger than the service accepts", 0)
	case errors.As(err, &b):
		status := http.StatusBadRequest
		switch b.Kind {
		case ledger.KindNotFound:
			status = http.StatusNotFound
		case ledger.KindInsufficientFunds:
			status = http.StatusPaymentRequired
		}
		s.writeProblem(w, status, string(b.Kind), b.Detail, 0)
	case errors.Is(err, ErrUnavailable):
		s.log.WarnContext(r.Context(), "a service the request needs did not answer", "method", r.Method, "path", r.URL.Path, "err", err)
		s.writeProblem(w, http.StatusServiceUnavailable, ProblemUpstreamUnavailable, "a service the request needs did not answer; retrying with the same Idempotency-Key is safe", 1)
	case r.Context().Err() != nil && errors.Is(err, r.Context().Err()):
		// The client hung up and the read it waited for ended with it:
		// nothing for an operator, and no one reads the answer.
		s.log.DebugContext(r.Context(), "request ended: its client left", "method", r.Method, "path", r.URL.Path, "err", err)
		s.writeProblem(w, http.StatusServiceUnavailable, ProblemClientGone, "the client left before the answer", 0)
	default:
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		s.writeProblem(w, http.StatusInternalServerError, ProblemInternal, "the service failed; retrying with the same Idempotency-Key is safe", 0)
	}
}

func tenant(r *http.Request) string {
	t, _ := TenantFromRequest(r)
	return t
}
