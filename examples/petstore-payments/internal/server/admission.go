package server

import (
	"bytes"
	"io"
	"net/http"
)

// readBody reads a request's body, up to one byte beyond the body limit,
// before next sees the request, and hands next the bytes it read followed
// by whatever is left, so that a body beyond the limit is still refused
// where it is today (413). It stands in front of admission: the time a
// client takes to send its body is spent before the request holds any of
// the capacity, and the read timeout ends a body that never arrives.
func (s *Server) readBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		head, err := io.ReadAll(io.LimitReader(r.Body, s.maxBody+1))
		if err != nil {
			// The client stopped sending: it hung up, or the read timeout
			// cut it off. Nothing was claimed or run.
			s.writeProblem(w, http.StatusBadRequest, ProblemValidation, "the request body could not be read completely", 0)
			return
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		next.ServeHTTP(w, r)
	})
}

// countGone counts the requests that reach a handler after their client
// has hung up (GoneRuns).
func (s *Server) countGone(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Err() != nil {
			s.goneRuns.Add(1)
		}
		next.ServeHTTP(w, r)
	})
}

// GoneRuns returns how many requests reached a handler after their client
// had hung up, since the server was built.
func (s *Server) GoneRuns() int64 { return s.goneRuns.Load() }
