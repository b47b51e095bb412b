package idemclient

import (
	"context"
	"net/http"
)

// A redirect that an http.Client follows reaches the Transport as a new
// request, built from the caller's request (its headers, a body from
// GetBody) without what the Transport added to its own copy: a key it
// chose, a query or body key. What links the new request to the hop before
// is its Response, the 307 or 308 the Transport returned; so every
// redirect the Transport returns leaves, in the context of its Request,
// what the next hop of the call needs.

// hop is what one hop of a call leaves for the next.
type hop struct {
	method string
	op     *Operation // the operation of the table the hop called, nil for none
	key    string     // the key it sent, "" for none
	rep    Report     // the call's report up to and including this hop
}

// handOn leaves h on res, the answer to req, when it is a redirect, for
// the redirected request to find. Other answers are left as they are.
func handOn(res *http.Response, req *http.Request, h *hop) {
	if res.StatusCode < 300 || res.StatusCode > 399 {
		return
	}
	sent := res.Request
	if sent == nil {
		sent = req
	}
	res.Request = sent.WithContext(context.WithValue(sent.Context(), hopKey, h))
}

// previousHop returns the hop whose answer req was redirected from, or nil
// for a request that is not a redirect of a Transport's answer.
func previousHop(req *http.Request) *hop {
	if req.Response == nil || req.Response.Request == nil {
		return nil
	}
	h, _ := req.Response.Request.Context().Value(hopKey).(*hop)
	return h
}

// carries returns the operation and key that req carries on from h. A
// redirect that keeps the method (a 307 or 308) repeats the request
// elsewhere: it is the same call of the same operation, under the same key,
// whether its target is in the table or not and whichever origin it is on,
// so that every retry of the call meets the target's record of it. A
// redirect that changes the method (a 303 to GET) is another request.
func (h *hop) carries(req *http.Request) (*Operation, string) {
	if h == nil || h.key == "" || req.Method != h.method {
		return nil, ""
	}
	return h.op, h.key
}

// then returns the call's report after a hop whose own report is r: the
// attempts of every hop, the operation and key the call was made with, and
// the last hop's answer.
func (h *hop) then(r Report) Report {
	if h == nil {
		return r
	}
	r.Redirects = h.rep.Redirects + 1
	r.Attempts += h.rep.Attempts
	if h.rep.Operation != "" {
		r.Operation = h.rep.Operation
	}
	if h.rep.Key != "" {
		r.Key = h.rep.Key
	}
	return r
}
