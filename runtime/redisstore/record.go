package redisstore

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// readClaim turns claimScript's reply into a Result. Go strings carry any
// bytes, so the fingerprint, headers and body arrive exactly as stored.
func readClaim(v []any) (idemstore.Result, error) {
	if len(v) == 0 {
		return idemstore.Result{}, errors.New("empty reply")
	}
	switch v[0] {
	case "won":
		return idemstore.Result{Won: true}, nil
	case "took_over":
		return idemstore.Result{Won: true, TookOver: true}, nil
	case "lost":
	default:
		return idemstore.Result{}, fmt.Errorf("unexpected reply %q", v[0])
	}
	if len(v) < 5 {
		return idemstore.Result{}, fmt.Errorf("lost reply has %d fields, want at least 5", len(v))
	}
	f := make([]string, len(v))
	for i, x := range v {
		switch x := x.(type) {
		case string:
			f[i] = x
		case nil:
			// A field the record does not have.
		default:
			return idemstore.Result{}, fmt.Errorf("reply field %d is a %T", i, x)
		}
	}
	rec := idemstore.Record{State: idemstore.State(f[1]), Operation: f[2], Fingerprint: []byte(f[3])}
	left, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return idemstore.Result{}, fmt.Errorf("lease remaining %q: %w", f[4], err)
	}
	// Lua's doubles round a lease near time.Duration's limit up past it;
	// clamp, so the remainder never wraps negative.
	rec.LeaseRemaining = time.Duration(min(max(left, 0), math.MaxInt64/1000)) * time.Microsecond
	if rec.State == idemstore.StateCompleted {
		if len(v) < 9 {
			return idemstore.Result{}, fmt.Errorf("completed reply has %d fields, want 9", len(v))
		}
		resp, err := readResponse(f[5], f[6], f[7], f[8])
		if err != nil {
			return idemstore.Result{}, err
		}
		rec.Response = resp
	}
	return idemstore.Result{Existing: rec}, nil
}

func readResponse(status, headers, body, omitted string) (*idemstore.Response, error) {
	code, err := strconv.Atoi(status)
	if err != nil {
		return nil, fmt.Errorf("stored status %q: %w", status, err)
	}
	// The stored headers are the SQL stores' binary encoding, not JSON: a
	// header value a handler writes may hold any bytes.
	h, err := headerwire.Decode([]byte(headers))
	if err != nil {
		return nil, fmt.Errorf("stored headers: %w", err)
	}
	resp := &idemstore.Response{Status: code, Header: h, Omitted: omitted == "1"}
	if body != "" {
		resp.Body = []byte(body)
	}
	return resp, nil
}
