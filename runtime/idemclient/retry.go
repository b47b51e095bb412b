package idemclient

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/problem"
)

const (
	headerRetryAfter = "Retry-After"
	// peekLimit bounds how much of an answer that may be retried is read:
	// enough to learn a 409's problem type (the engine's problems are far
	// smaller) and to let a small answer's connection be reused.
	peekLimit = 64 << 10
)

// replayed reports whether res says it is the server's record of the
// request, replayed.
func replayed(res *http.Response) bool {
	return res.Header.Get(problem.ReplayedHeader) == "true"
}

// ErrPermanent, wrapped in an error of the Base RoundTripper, stops the
// retries of the call: the error is returned as it is. Errors that are not
// about the network (a certificate that does not verify) stop them too.
var ErrPermanent = errors.New("idemclient: permanent error")

// verdict says whether an attempt's outcome calls for a retry and how long
// to wait before it. head is the start of the answer's body, read when the
// answer may be retried; keyed says the request carried a key; retries
// counts the attempts so far.
func (t *Transport) verdict(res *http.Response, head []byte, err error, keyed bool, retries int) (again bool, wait, least time.Duration) {
	if err != nil {
		if permanent(err) {
			return false, 0, 0
		}
		wait = t.backoff(retries)
		return true, wait, wait
	}
	if !mayRetry(res, keyed) {
		return false, 0, 0
	}
	if res.StatusCode == http.StatusConflict && problemOf(res, head) != problem.InProgress {
		// Only request-in-progress is worth waiting for; outcome-unknown
		// and response-not-replayable stay what they are, and a 409 of the
		// application's own is a business answer.
		return false, 0, 0
	}
	if res.StatusCode == http.StatusInternalServerError && finalProblem(problemOf(res, head)) {
		return false, 0, 0
	}
	wait = t.backoff(retries)
	least = wait
	if ra, ok := retryAfter(res.Header.Values(headerRetryAfter), time.Now()); ok && ra > wait {
		// Every client a server answers with the same Retry-After in one
		// moment would come back in the same moment: each waits up to a
		// quarter longer than asked, drawn, and never less.
		least = ra
		wait = ra
		if spread := ra / 4; spread > 0 && ra < math.MaxInt64-spread {
			wait += t.draw(spread + 1)
		}
	}
	return true, wait, least
}

// mayRetry reports whether res, the answer to a request sent with a key
// or not (keyed), may call for a retry: its status is one the server never
// stores, and it is not a replay. A replay is the server's record of a
// keyed request, whatever its status (a 500 stored under
// cacheServerErrors): asking again returns the same record, so a retry
// would only spend the budget and keep the caller waiting. A request sent
// without a key has no record, and the header on its answer means nothing.
func mayRetry(res *http.Response, keyed bool) bool {
	return retryableStatus(res.StatusCode) && !(keyed && replayed(res))
}

// finalProblem reports whether a 500 with the problem type name is final:
// the key is not free for a retry (outcome-unknown: the writes may or may
// not stand, and the key stays held or indeterminate;
// stored-response-unreadable: the request ran and its record cannot be
// opened), or the server cannot run the operation until it is fixed
// (transaction-unavailable, request-body-read-in-front). Each tells the
// caller to contact support, which a retry would hide behind the 409s of
// the held key or spend the budget on.
func finalProblem(name string) bool {
	switch name {
	case problem.OutcomeUnknown, problem.ResponseUnreadable, problem.TransactionMissing, problem.BodyReadInFront:
		return true
	}
	return false
}

// retryableStatus reports whether an answer with status code may call for
// a retry. The server stores none of 408, 429, 500, 502, 503 and 504
// (docs/semantics.md §3.4; a 500 is stored only under cacheServerErrors, and its
// replay is final): the key is free again and a retry is what the server
// asks for. A 409 is retried when it is request-in-progress.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusConflict:
		return true
	}
	return false
}

// backoff draws the wait before retry n+1: uniform in [0, base·2ⁿ⁻¹],
// capped at BackoffMax. Full jitter spreads the clients that failed
// together, so they do not come back together.
func (t *Transport) backoff(n int) time.Duration {
	ceil := t.cfg.BackoffMax
	if shift := n - 1; shift < 32 && t.cfg.BackoffBase<<shift > 0 && t.cfg.BackoffBase<<shift < ceil {
		ceil = t.cfg.BackoffBase << shift
	}
	if ceil < math.MaxInt64 {
		ceil++ // so that ceil itself can be drawn
	}
	return t.draw(ceil)
}

// retryAfter reads the Retry-After values of an answer: delay-seconds or
// an HTTP-date (RFC 9110 §10.2.3). Of repeated values the longest counts,
// so a retry never comes sooner than any of them asks; a value too large
// for a Duration is the longest Duration, which no budget allows. ok is
// false when no value can be read.
func retryAfter(vs []string, now time.Time) (wait time.Duration, ok bool) {
	for _, v := range vs {
		if d, valid := retryAfterValue(v, now); valid && (!ok || d > wait) {
			wait, ok = d, true
		}
	}
	return wait, ok
}

func retryAfterValue(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		// delay-seconds is digits only: no sign, no fraction. Too many
		// digits for an int64 is the only error left.
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s > int64(math.MaxInt64/time.Second) {
			return math.MaxInt64, true
		}
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

func permanent(err error) bool {
	if errors.Is(err, ErrPermanent) {
		return true
	}
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// peek returns the first bytes of res's body and leaves the body readable
// from its start.
func peek(res *http.Response) []byte {
	head, _ := io.ReadAll(io.LimitReader(res.Body, peekLimit))
	res.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), res.Body), res.Body}
	return head
}

// problemOf is the problem type name of an answer whose body starts with
// head, decoded first when the answer is gzip- or deflate-encoded (a
// caller that set Accept-Encoding itself gets the body as it came, and
// compression middleware encodes problems too), reading at most peekLimit
// decoded bytes.
func problemOf(res *http.Response, head []byte) string {
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(res.Header.Get("Content-Encoding"))) {
	case "", "identity":
		return ProblemType(head)
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(head))
		if err != nil {
			return ""
		}
		r = zr
	case "deflate":
		// RFC 9110's deflate is zlib-wrapped; some servers send it raw.
		if zr, err := zlib.NewReader(bytes.NewReader(head)); err == nil {
			r = zr
		} else {
			r = flate.NewReader(bytes.NewReader(head))
		}
	default:
		return ""
	}
	// A head cut at peekLimit ends its stream early: what was decoded of
	// it is read all the same.
	body, _ := io.ReadAll(io.LimitReader(r, peekLimit))
	return ProblemType(body)
}

// ProblemType returns the problem type name of an RFC 9457 body: the last
// path segment of its "type" URI, which is how the server's names are
// appended to its problem base. It returns "" for a body that is not a
// problem.
func ProblemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil || p.Type == "" {
		return ""
	}
	return p.Type[strings.LastIndexByte(p.Type, '/')+1:]
}
