package server

import (
	"bytes"
	"context"
	"net/http"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
)

// plainTx mounts transactional handlers on plain database transactions, for
// --idempotency=off. The response is held back until the transaction has
// committed: a 201 is never sent for writes that did not commit. A 5xx
// rolls back.
func (s *Server) plainTx(begin func(context.Context) (*database.Tx, error)) TxMount {
	return func(_ string, h TxHandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The work is finished even when the client has gone: that is
			// what a server without idempotency does, and why a client's
			// retry then moves the money twice. (database/sql would roll
			// back a transaction whose context ends.)
			ctx := context.WithoutCancel(r.Context())
			tx, err := begin(ctx)
			if err != nil {
				s.log.ErrorContext(r.Context(), "begin", "err", err)
				s.writeProblem(w, http.StatusServiceUnavailable, ProblemDatabaseUnavailable, "the database is not available; retry later", 1)
				return
			}
			defer func() { _ = tx.Rollback(ctx) }()
			rec := &recorder{header: http.Header{}, status: http.StatusOK}
			h(rec, r.WithContext(ctx), tx)
			if rec.status < 500 {
				if err := tx.Commit(ctx); err != nil {
					s.log.ErrorContext(r.Context(), "commit", "err", err)
					s.writeProblem(w, http.StatusInternalServerError, ProblemInternal, "the transaction did not commit; nothing was changed", 0)
					return
				}
			}
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
		})
	}
}

// recorder buffers a response.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}
