package idem_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// These tests attack the answer the engine keeps as a handler at the HTTP
// edge writes it, over a real server (HTTP/1.1 and HTTP/2).

// edgePost sends one protected POST to srv under key and returns the
// answer with its body and trailers read.
func edgePost(t *testing.T, srv *httptest.Server, key string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(`{"amount":1,"to":"a"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b)
}

// edgeServers serves h over HTTP/1.1 and over HTTP/2, one subtest each.
func edgeServers(t *testing.T, h http.Handler, run func(t *testing.T, srv *httptest.Server)) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = h2
			if h2 {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			run(t, srv)
		})
	}
}

// A handler that writes a kept header under a name that is not in
// canonical form sends it on its first answer: w.Header()["ETag"], Go's
// usual way to keep that header's spelling (the canonical form is "Etag"),
// or a map filled directly in lower case. docs/semantics.md §3.5 and §7.5
// keep them for the replay (Location and Content-Type always, ETag when
// the policy lists it), whatever the spelling of the map key, under the
// name the handler wrote: the replay sends what the first answer sent.
func TestEdgeReplayKeepsHeadersWrittenInAnyCase(t *testing.T) {
	p := transferPolicy()
	p.ReplayHeaders = append(p.ReplayHeaders, "ETag")
	e := newEngine(t, idem.Config{Policies: []idem.Policy{p}})
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["ETag"] = []string{`"v1"`}
		w.Header()["location"] = []string{"/transfers/tr_1"}
		w.Header()["content-type"] = []string{"application/json"}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1"}`))
	}))
	edgeServers(t, h, func(t *testing.T, srv *httptest.Server) {
		first, _ := edgePost(t, srv, t.Name())
		second, _ := edgePost(t, srv, t.Name())
		if second.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("second answer not a replay: %d %v", second.StatusCode, second.Header)
		}
		for _, name := range []string{"Etag", "Location", "Content-Type"} {
			if got, want := second.Header.Values(name), first.Header.Values(name); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("%s: first answer %q, replay %q", name, want, got)
			}
		}
	})
}

// A header the policy keeps (X-Request-Cost is in transferPolicy's
// replayHeaders) written as a trailer through http.TrailerPrefix reaches
// the first client as a trailer, and its replay as one too.
func TestEdgeReplayKeepsKeptTrailers(t *testing.T) {
	e := newEngine(t, idem.Config{Policies: []idem.Policy{transferPolicy()}})
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1"}`))
		w.Header().Set(http.TrailerPrefix+"X-Request-Cost", "7")
	}))
	edgeServers(t, h, func(t *testing.T, srv *httptest.Server) {
		first, _ := edgePost(t, srv, t.Name())
		second, _ := edgePost(t, srv, t.Name())
		if first.Trailer.Get("X-Request-Cost") != "7" {
			t.Fatalf("first answer's trailers %v, want X-Request-Cost: 7", first.Trailer)
		}
		if second.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("second answer not a replay: %d %v", second.StatusCode, second.Header)
		}
		if second.Trailer.Get("X-Request-Cost") != "7" || second.Header.Get("X-Request-Cost") != "" {
			t.Errorf("replay carries X-Request-Cost otherwise than as a trailer (header %v, trailer %v)", second.Header, second.Trailer)
		}
	})
}

// A ServeMux serves a pattern with a host ("POST legacy.example/transfers")
// ahead of the host-less one for requests to that host. CheckRoutes' sample
// request names no host, so a protected operation that one host reaches
// through a handler without its policy is found only when CheckRoutes is
// given that host; engine.ServeMux applies the policy to such a pattern
// itself, and a request sent twice to that host runs once.
func TestEdgeCheckRoutesSeesHostPatterns(t *testing.T) {
	var runs atomic.Int64
	e := newEngine(t, idem.Config{Policies: []idem.Policy{transferPolicy()}})
	plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /transfers", e.Handler("createTransfer", plain))
	mux.Handle("POST legacy.example/transfers", plain)
	if err := e.CheckRoutes(idem.PerRoute, mux.Handler); err != nil {
		t.Fatalf("CheckRoutes without hosts = %v, want nil: the sample request reaches the host-less pattern", err)
	}
	err := e.CheckRoutes(idem.PerRoute, mux.Handler, "legacy.example")
	if err == nil || !strings.Contains(err.Error(), "legacy.example/transfers") {
		t.Fatalf("CheckRoutes with legacy.example = %v, want legacy.example's route reported", err)
	}

	through := e.ServeMux(http.NewServeMux())
	through.Handle("POST /transfers", plain)
	through.Handle("POST legacy.example/transfers", plain)
	if err := e.CheckRoutes(idem.PerRoute, through.Handler, "legacy.example"); err != nil {
		t.Fatalf("CheckRoutes through engine.ServeMux = %v, want nil", err)
	}
	runs.Store(0)
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "http://legacy.example/transfers", strings.NewReader(`{"amount":1,"to":"a"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k-host")
		through.ServeHTTP(httptest.NewRecorder(), r)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("one request sent twice to legacy.example through engine.ServeMux ran %d times, want 1", n)
	}
}

// A request's framing is not part of it: the same body sent with
// Expect: 100-continue, chunked with a trailer (which may not carry the
// key), or plainly is one request, run once and replayed to the others,
// a large kept header included, over a raw HTTP/1.1 connection.
func TestEdgeRequestFramingHolds(t *testing.T) {
	var runs atomic.Int64
	big := strings.Repeat("x", 100<<10)
	e := newEngine(t, idem.Config{Policies: []idem.Policy{transferPolicy()}})
	srv := httptest.NewServer(e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", "/transfers/"+big)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1"}`))
	})))
	defer srv.Close()
	body := `{"amount":1,"to":"a"}`
	raw := func(head, payload string) string {
		t.Helper()
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, head)
		br := bufio.NewReader(conn)
		if strings.Contains(head, "100-continue") {
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusContinue {
				t.Fatalf("no 100 Continue: %v %v", resp, err)
			}
		}
		_, _ = io.WriteString(conn, payload)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s %s %d", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b, len(resp.Header.Get("Location")))
	}
	common := "POST /transfers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: k-frame\r\n"
	first := raw(common+"Expect: 100-continue\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\n\r\n", body)
	chunked := raw(common+"Transfer-Encoding: chunked\r\nTrailer: Idempotency-Key\r\n\r\n",
		fmt.Sprintf("%x\r\n%s\r\n0\r\nIdempotency-Key: k-other\r\n\r\n", len(body), body))
	plain := raw(common+"Content-Length: "+fmt.Sprint(len(body))+"\r\n\r\n", body)
	want := fmt.Sprintf("201 true {\"id\":\"tr_1\"} %d", len("/transfers/"+big))
	if !strings.HasPrefix(first, "201  ") || chunked != want || plain != want || runs.Load() != 1 {
		t.Fatalf("answers %q, %q, %q in %d runs; want one run and its replays", first[:40], chunked, plain, runs.Load())
	}
}

// A handler that writes a body on a 204 (w.WriteHeader(204) then an
// encoder's Write; net/http refuses the bytes with ErrBodyNotAllowed, and
// the client sees no body) has the bytes captured and stored, and the
// replay declares them: Content-Length: 1 on a 204, which RFC 9110 §8.6
// forbids. Over HTTP/2 a strict client (curl with nghttp2, browsers)
// rejects that response as malformed (curl exits 92, a stream
// PROTOCOL_ERROR): a retry could never read the answer the first attempt
// got. The engine refuses the bytes as net/http does, and a replay of a
// 204 declares no body.
func TestEdgeReplayOfBodilessStatus(t *testing.T) {
	e := newEngine(t, idem.Config{Policies: []idem.Policy{transferPolicy()}})
	writeErr := make(chan error, 1)
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		_, err := w.Write([]byte("x"))
		writeErr <- err
	}))
	edgeServers(t, h, func(t *testing.T, srv *httptest.Server) {
		first, _ := edgePost(t, srv, t.Name())
		if err := <-writeErr; !errors.Is(err, http.ErrBodyNotAllowed) {
			t.Errorf("a body written on a 204: %v, want http.ErrBodyNotAllowed as net/http answers", err)
		}
		second, sb := edgePost(t, srv, t.Name())
		if second.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("second answer not a replay: %d %v", second.StatusCode, second.Header)
		}
		if cl := second.Header.Get("Content-Length"); cl != first.Header.Get("Content-Length") || sb != "" {
			t.Errorf("replay of a 204: Content-Length %q and body %q, first answer's Content-Length %q", cl, sb, first.Header.Get("Content-Length"))
		}
	})
}
