package server

import "net/http"

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
