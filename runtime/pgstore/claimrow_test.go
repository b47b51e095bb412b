package pgstore

import (
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// The wire decoder is exercised against the real database by every store
// test; these cases cover the shapes a healthy database never sends.

func claimFDs() []pgconn.FieldDescription {
	var fds []pgconn.FieldDescription
	for _, oid := range claimColumns() {
		format := int16(pgtype.BinaryFormatCode)
		if oid == pgtype.TextOID {
			format = pgtype.TextFormatCode // as pgx asks for them
		}
		fds = append(fds, pgconn.FieldDescription{DataTypeOID: oid, Format: format})
	}
	return fds
}

func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// record encodes a binary composite of (oid, value) fields; a nil value is
// NULL.
func record(fields ...any) []byte {
	b := be32(int32(len(fields) / 2))
	for i := 0; i < len(fields); i += 2 {
		b = append(b, be32(int32(fields[i].(int)))...) // the OIDs are untyped constants
		v := fields[i+1].([]byte)
		if v == nil {
			b = append(b, be32(-1)...)
			continue
		}
		b = append(b, be32(int32(len(v)))...)
		b = append(b, v...)
	}
	return b
}

func TestDecodeStoredRow(t *testing.T) {
	const lease = 1_500_000 // µs
	vals := [][]byte{
		[]byte("in_flight"), []byte("op"), {1, 2},
		be64(10_000_000 + lease), be64(10_000_000),
		nil, nil, nil, {0},
		nil,
	}
	r, err := decodeClaimRow(claimFDs(), vals)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.result(idemstore.Claim{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Won || res.Existing.State != idemstore.StateInFlight || res.Existing.Operation != "op" ||
		res.Existing.LeaseRemaining != lease*time.Microsecond {
		t.Fatalf("result = %+v, want in flight with %v left", res, lease*time.Microsecond)
	}

	// A lease that ran out while the statement ran is zero, not negative;
	// an infinite one is long, not negative.
	vals[3] = be64(9_000_000)
	if r, err = decodeClaimRow(claimFDs(), vals); err != nil || r.remaining != 0 {
		t.Fatalf("remaining = %v, %v; want 0", r.remaining, err)
	}
	vals[3] = be64(math.MaxInt64)
	if r, err = decodeClaimRow(claimFDs(), vals); err != nil || r.remaining < 100*365*24*time.Hour {
		t.Fatalf("remaining = %v, %v; want a very long lease", r.remaining, err)
	}
}

func TestDecodeFunctionRecord(t *testing.T) {
	vals := make([][]byte, 10)
	vals[9] = record(
		pgtype.TextOID, []byte("lost"), pgtype.TextOID, []byte("completed"), pgtype.TextOID, []byte("op"),
		pgtype.ByteaOID, []byte{9}, pgtype.Int8OID, []byte(nil), pgtype.Int4OID, be32(201),
		pgtype.ByteaOID, headerwire.Encode(http.Header{"Location": {"/x"}}), pgtype.ByteaOID, []byte("body"),
		pgtype.BoolOID, []byte{0},
	)
	r, err := decodeClaimRow(claimFDs(), vals)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.result(idemstore.Claim{})
	if err != nil {
		t.Fatal(err)
	}
	resp := res.Existing.Response
	if res.Existing.State != idemstore.StateCompleted || resp == nil || resp.Status != 201 ||
		string(resp.Body) != "body" || resp.Header.Get("Location") != "/x" {
		t.Fatalf("result = %+v (response %+v), want the completed row", res, resp)
	}
}

func TestDecodeRejectsOtherShapes(t *testing.T) {
	full := func() [][]byte {
		return [][]byte{[]byte("completed"), []byte("op"), {1}, nil, be64(0), be32(200), nil, nil, {0}, nil}
	}
	cases := []struct {
		name   string
		fds    func() []pgconn.FieldDescription
		vals   func() [][]byte
		want   string
		isMode bool
	}{
		{"text format for a binary column", func() []pgconn.FieldDescription {
			fds := claimFDs()
			fds[5].Format = pgtype.TextFormatCode
			return fds
		}, full, "column 5", true},
		{"other type", func() []pgconn.FieldDescription {
			fds := claimFDs()
			fds[2].DataTypeOID = pgtype.TextOID
			return fds
		}, full, "column 2", true},
		{"missing column", func() []pgconn.FieldDescription { return claimFDs()[:9] }, func() [][]byte { return full()[:9] }, "9 columns", false},
		{"short int4", claimFDs, func() [][]byte { v := full(); v[5] = []byte{0, 1}; return v }, "int4", false},
		{"neither row nor outcome", claimFDs, func() [][]byte { return make([][]byte, 10) }, "neither", false},
		{"record with a field of another type", claimFDs, func() [][]byte {
			v := make([][]byte, 10)
			v[9] = record(pgtype.TextOID, []byte("won"), pgtype.Int4OID, be32(1), pgtype.TextOID, []byte(nil),
				pgtype.ByteaOID, []byte(nil), pgtype.Int8OID, []byte(nil), pgtype.Int4OID, []byte(nil),
				pgtype.ByteaOID, []byte(nil), pgtype.ByteaOID, []byte(nil), pgtype.BoolOID, []byte(nil))
			return v
		}, "field 1", false},
		{"truncated record", claimFDs, func() [][]byte {
			v := make([][]byte, 10)
			v[9] = record(pgtype.TextOID, []byte("won"))[:9]
			return v
		}, "", false},
		{"record without outcome", claimFDs, func() [][]byte {
			v := make([][]byte, 10)
			v[9] = record(pgtype.TextOID, []byte(nil), pgtype.TextOID, []byte(nil), pgtype.TextOID, []byte(nil),
				pgtype.ByteaOID, []byte(nil), pgtype.Int8OID, []byte(nil), pgtype.Int4OID, []byte(nil),
				pgtype.ByteaOID, []byte(nil), pgtype.ByteaOID, []byte(nil), pgtype.BoolOID, []byte(nil))
			return v
		}, "no outcome", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeClaimRow(c.fds(), c.vals())
			if err == nil {
				t.Fatal("decoded, want an error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
			if errors.Is(err, ErrQueryExecMode) != c.isMode {
				t.Errorf("error %q: errors.Is(ErrQueryExecMode) = %v, want %v", err, !c.isMode, c.isMode)
			}
		})
	}
}

func TestUnknownOutcomeIsAnError(t *testing.T) {
	if _, err := (claimRow{outcome: "maybe"}).result(idemstore.Claim{}); err == nil {
		t.Fatal("an unknown outcome was accepted")
	}
	if _, err := (claimRow{outcome: outcomeLost}).result(idemstore.Claim{}); err == nil {
		t.Fatal("a lost outcome without a row was accepted")
	}
}
