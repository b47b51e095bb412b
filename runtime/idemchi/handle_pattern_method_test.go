package idemchi_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idemchi"
)

// chi's Handle reads a pattern's method as its Method does: cut at the
// first space or tab, in any case ("post /pets/{id}/photos" is POST). A route
// registered so through Router is the operation's route to chi, and must
// get the operation's policy (docs/runtime.md, Registering routes through
// the engine): a retry with the same key is a replay, and the handler runs
// once.
func TestHandleWithMethodInPatternGetsThePolicy(t *testing.T) {
	for _, pattern := range []string{
		"POST /pets/{id}/photos",  // the spelling Router recognises
		"post /pets/{id}/photos",  // chi upper-cases the method
		"POST\t/pets/{id}/photos", // chi cuts at a tab as well
	} {
		t.Run(pattern, func(t *testing.T) {
			e, _ := newEngine(t, "")
			var runs atomic.Int64
			r := chi.NewRouter()
			r.Use(auth)
			idemchi.Router(e, r).Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))

			first := post(r, "/pets/p1/photos", "k1")
			second := post(r, "/pets/p1/photos", "k1")
			if first.Code != http.StatusCreated {
				t.Fatalf("first: %d %s", first.Code, first.Body)
			}
			if n := runs.Load(); n != 1 || second.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("route %q registered through idemchi.Router: the handler ran %d times for one key (retry %d, replayed=%q): chi serves it as POST /pets/{id}/photos (createPet), but the operation's policy was not applied",
					pattern, n, second.Code, second.Header().Get("Idempotent-Replayed"))
			}
		})
	}
}
