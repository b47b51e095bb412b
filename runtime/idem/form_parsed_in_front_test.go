package idem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/problem"
)

// Middleware in front of the engine that reads a form field (a CSRF check's
// r.FormValue("csrf_token"), a method override's r.FormValue("_method"),
// a log line's r.ParseForm) drains the body into r.PostForm. The engine
// then reads an empty body and fingerprints that, while the handler reads
// the parsed form net/http keeps on the request: two requests under one
// key with different form bodies share a fingerprint, and the second is
// answered with the first's replay, where docs/semantics.md §3.5 answers
// 422 idempotency-key-reused. Its client takes another request's answer
// for its own, and the transfer it asked for never happens.
func TestFormParsedInFrontIsFingerprinted(t *testing.T) {
	p := transferPolicy()
	p.Fingerprint = fingerprint.Spec{MediaType: "application/x-www-form-urlencoded"}
	e := newEngine(t, idem.Config{Policies: []idem.Policy{p}})
	var ran []string
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		amount := r.PostFormValue("amount")
		ran = append(ran, amount)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"amount":%q}`, amount)
	}))
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.FormValue("csrf_token") // parses the form body
		h.ServeHTTP(w, r)
	})
	send := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		front.ServeHTTP(w, r)
		return w
	}
	first := send("amount=5&csrf_token=t")
	other := send("amount=500&csrf_token=t")
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	if other.Code != http.StatusUnprocessableEntity {
		t.Fatalf("a second request under the same key with another form body (amount=500) was answered %d %s (Idempotent-Replayed %q; handler runs %q); want 422 idempotency-key-reused",
			other.Code, other.Body, other.Header().Get("Idempotent-Replayed"), ran)
	}
}

// A multipart form parsed in front of the engine cannot be read back as
// the body its client sent: the request is refused with 500
// request-body-read-in-front and its handler does not run, where an empty
// body would have been fingerprinted in its place.
func TestMultipartParsedInFrontIsRefused(t *testing.T) {
	e := newEngine(t, idem.Config{Policies: []idem.Policy{transferPolicy()}})
	ran := 0
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran++
		w.WriteHeader(http.StatusCreated)
	}))
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseMultipartForm(1 << 20)
		h.ServeHTTP(w, r)
	})
	body := "--b\r\nContent-Disposition: form-data; name=\"amount\"\r\n\r\n5\r\n--b--\r\n"
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	r.Header.Set("Idempotency-Key", "k1")
	w := httptest.NewRecorder()
	front.ServeHTTP(w, r)
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), problem.BodyReadInFront) || ran != 0 {
		t.Fatalf("a multipart form parsed in front: %d %s, handler ran %d times; want 500 %s and no run", w.Code, w.Body, ran, problem.BodyReadInFront)
	}
}
