package pgstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// The claim's row is read from PostgreSQL's binary format directly rather
// than through Rows.Scan. A replay is one primary-key read, and pgx's
// general scan path (a scan plan per column, a heap-allocated destination
// for the composite column) cost the client about as much as the server
// spent on the extra work of the statement. The row's shape is fixed by
// claimSQL and idempotency_claim, so the types are checked, not looked up:
// a row of any other shape is an error, never a guess.

// The outcomes idempotency_claim reports.
const (
	outcomeWon      = "won"
	outcomeTookOver = "took_over"
	outcomeLost     = "lost"
	outcomeMismatch = "mismatch"
	outcomeBusy     = "busy"
	outcomeBusyElse = "busy_other"
)

// claimColumns are the types of claimSQL's columns, in order.
func claimColumns() [10]uint32 {
	return [10]uint32{
		pgtype.TextOID, pgtype.TextOID, pgtype.ByteaOID, // state, operation, fingerprint
		pgtype.TimestamptzOID, pgtype.TimestamptzOID, // lease_until, now
		pgtype.Int4OID, pgtype.ByteaOID, pgtype.ByteaOID, pgtype.BoolOID, // status, headers, body, body_omitted
		pgtype.RecordOID, // idempotency_claim(...)
	}
}

// claimFields are the types of the fields of idempotency_claim's record.
func claimFields() [9]uint32 {
	return [9]uint32{
		pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.ByteaOID, // outcome, state, operation, fingerprint
		pgtype.Int8OID,                                                   // lease remaining in µs
		pgtype.Int4OID, pgtype.ByteaOID, pgtype.ByteaOID, pgtype.BoolOID, // status, headers, body, body_omitted
	}
}

// claimRow is a decoded claim: what the stored row says when it decided the
// claim (outcome empty), or what idempotency_claim returned.
type claimRow struct {
	outcome     string
	state       string // "" for no row: the column is NOT NULL and never empty
	operation   string
	fingerprint []byte
	remaining   time.Duration
	status      int32
	headers     []byte // headerwire bytes in the driver's buffer, still to be decoded
	body        []byte
	omitted     bool
}

// readClaim reads the single row of claimSQL from rows and closes them.
// outcome is idempotency_claim's: after 'busy' or 'busy_other' the caller
// must ask more before it answers (answerHeld).
func readClaim(rows pgx.Rows, c idemstore.Claim) (res idemstore.Result, outcome string, err error) {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return idemstore.Result{}, "", err
		}
		return idemstore.Result{}, "", errors.New("the claim returned no row")
	}
	r, err := decodeClaimRow(rows.FieldDescriptions(), rows.RawValues())
	if err != nil {
		return idemstore.Result{}, "", err
	}
	// Before Close: the headers still point into the driver's buffer.
	res, err = r.result(c)
	rows.Close()
	if err := rows.Err(); err != nil {
		return idemstore.Result{}, "", err
	}
	return res, r.outcome, err
}

// readTxClaim reads the single row of txClaimSQL from rows and closes
// them; outcome is as for readClaim.
func readTxClaim(rows pgx.Rows, c idemstore.Claim) (res idemstore.Result, outcome string, err error) {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return idemstore.Result{}, "", err
		}
		return idemstore.Result{}, "", errors.New("the claim returned no row")
	}
	var r claimRow
	values := rows.RawValues()
	err = checkColumns(rows.FieldDescriptions(), values, []uint32{pgtype.RecordOID})
	if err == nil && values[0] == nil {
		err = errors.New("the claim returned no outcome")
	}
	if err == nil {
		r, err = decodeClaimRecord(values[0])
	}
	if err == nil {
		// Before Close: the headers still point into the driver's buffer.
		res, err = r.result(c)
	}
	rows.Close()
	if rerr := rows.Err(); err == nil {
		err = rerr
	}
	if err != nil {
		return idemstore.Result{}, "", err
	}
	return res, r.outcome, nil
}

// readPeek reads peekSQL's rows and closes them: decided reports whether
// a row decided the claim, and res is then the answer to c.
func readPeek(rows pgx.Rows, c idemstore.Claim) (res idemstore.Result, decided bool, err error) {
	defer rows.Close()
	if !rows.Next() {
		return idemstore.Result{}, false, rows.Err()
	}
	want := claimColumns()
	var r claimRow
	err = checkColumns(rows.FieldDescriptions(), rows.RawValues(), want[:len(want)-1])
	if err == nil {
		r, err = decodeDecidingRow(rows.RawValues())
	}
	if err == nil {
		// Before Close: the headers still point into the driver's buffer.
		res, err = r.result(c)
	}
	rows.Close()
	if rerr := rows.Err(); err == nil {
		err = rerr
	}
	if err != nil {
		return idemstore.Result{}, false, err
	}
	return res, true, nil
}

// decodeClaimRow decodes the raw values of one row of claimSQL. Everything
// it returns but the headers is copied out of values, which belong to the
// driver's buffer.
func decodeClaimRow(fds []pgconn.FieldDescription, values [][]byte) (claimRow, error) {
	want := claimColumns()
	if err := checkColumns(fds, values, want[:]); err != nil {
		return claimRow{}, err
	}
	if values[9] != nil {
		return decodeClaimRecord(values[9])
	}
	return decodeDecidingRow(values)
}

// checkColumns checks that a row's columns, described by fds, are of the
// types want, in the binary format.
func checkColumns(fds []pgconn.FieldDescription, values [][]byte, want []uint32) error {
	if len(fds) != len(want) || len(values) != len(want) {
		return fmt.Errorf("the claim returned %d columns, want %d", len(values), len(want))
	}
	for i, fd := range fds {
		// pgx asks for text in the text format, the rest in binary; text
		// is the same bytes in both.
		textual := fd.DataTypeOID == pgtype.TextOID
		if fd.DataTypeOID != want[i] || (fd.Format != pgtype.BinaryFormatCode && !textual) {
			return fmt.Errorf("claim column %d is type %d in format %d, want type %d in binary (%w)",
				i, fd.DataTypeOID, fd.Format, want[i], ErrQueryExecMode)
		}
	}
	return nil
}

// decodeDecidingRow decodes the columns of a row that decides a claim
// (decidingColumnsSQL), the first nine of values.
func decodeDecidingRow(values [][]byte) (claimRow, error) {
	var (
		r claimRow
		d wireDecoder
	)
	r.state, _ = d.text(values[0])
	r.operation, _ = d.text(values[1])
	r.fingerprint = d.bytea(values[2])
	leaseUntil, hasLease := d.int64(values[3])
	now, hasNow := d.int64(values[4])
	r.status, _ = d.int32(values[5])
	r.headers = values[6]
	r.body = d.bytea(values[7])
	r.omitted, _ = d.bool(values[8])
	if d.err != nil {
		return claimRow{}, d.err
	}
	if r.state == "" {
		return claimRow{}, errors.New("the claim returned neither a row nor an outcome")
	}
	if r.state == string(idemstore.StateInFlight) && hasLease && hasNow {
		// Both are microseconds on the database clock.
		r.remaining = microseconds(leaseUntil - now)
	}
	return r, nil
}

// decodeClaimRecord decodes idempotency_claim's record.
func decodeClaimRecord(src []byte) (claimRow, error) {
	want := claimFields()
	rs := pgtype.NewCompositeBinaryScanner(nil, src)
	if rs.FieldCount() != len(want) {
		return claimRow{}, fmt.Errorf("idempotency_claim returned %d fields, want %d", rs.FieldCount(), len(want))
	}
	var (
		r claimRow
		d wireDecoder
	)
	for i := 0; rs.Next(); i++ {
		if i >= len(want) || rs.OID() != want[i] {
			return claimRow{}, fmt.Errorf("idempotency_claim field %d has type %d", i, rs.OID())
		}
		v := rs.Bytes()
		switch i {
		case 0:
			r.outcome, _ = d.text(v)
		case 1:
			r.state, _ = d.text(v)
		case 2:
			r.operation, _ = d.text(v)
		case 3:
			r.fingerprint = d.bytea(v)
		case 4:
			us, _ := d.int64(v)
			r.remaining = microseconds(us)
		case 5:
			r.status, _ = d.int32(v)
		case 6:
			r.headers = v
		case 7:
			r.body = d.bytea(v)
		case 8:
			r.omitted, _ = d.bool(v)
		}
	}
	if err := rs.Err(); err != nil {
		return claimRow{}, err
	}
	if d.err != nil {
		return claimRow{}, d.err
	}
	if r.outcome == "" {
		return claimRow{}, errors.New("idempotency_claim returned no outcome")
	}
	return r, nil
}

// microseconds converts a lease's remaining microseconds to a Duration:
// never negative (a lease that ran out while the statement ran), and capped
// rather than overflowing (an infinite timestamp).
func microseconds(us int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Microsecond)
	return time.Duration(min(max(us, 0), most)) * time.Microsecond
}

// busyResult is the answer to a claim that met its own request holding
// the key where the row cannot tell: it is in flight, and how long its
// lease has left is unknown.
func busyResult(c idemstore.Claim) idemstore.Result {
	return idemstore.Result{Existing: idemstore.Record{
		State:       idemstore.StateInFlight,
		Operation:   c.Operation,
		Fingerprint: bytes.Clone(c.Fingerprint),
	}}
}

// busyOtherResult is the answer to a claim whose key another request holds
// while its row is not visible yet (docs/semantics.md §5.1: a different
// request is a 422 whatever the row's state). Which operation and
// fingerprint it holds cannot be read, only that they are not c's: the
// record carries c's operation and no fingerprint, which no claim's
// fingerprint equals.
func busyOtherResult(c idemstore.Claim) idemstore.Result {
	return idemstore.Result{Existing: idemstore.Record{
		State:     idemstore.StateInFlight,
		Operation: c.Operation,
	}}
}

// result turns the decoded row into the store's answer to c.
func (r claimRow) result(c idemstore.Claim) (idemstore.Result, error) {
	switch r.outcome {
	case "", outcomeLost, outcomeMismatch:
		// A stored row decided; the caller compares it with its request.
	case outcomeWon:
		return idemstore.Result{Won: true}, nil
	case outcomeTookOver:
		return idemstore.Result{Won: true, TookOver: true}, nil
	case outcomeBusy:
		// A claimant of the same request holds the key's locks and its row
		// is not visible yet (a claim in progress, or a transactional claim
		// whose transaction is open).
		return busyResult(c), nil
	case outcomeBusyElse:
		// The key's lock is held without this request's lock; settle says
		// whether by another request. Until it has, the answer is the one
		// for another request.
		return busyOtherResult(c), nil
	default:
		return idemstore.Result{}, fmt.Errorf("unexpected claim outcome %q", r.outcome)
	}
	if r.state == "" {
		return idemstore.Result{}, fmt.Errorf("claim outcome %q without a row", r.outcome)
	}
	rec := idemstore.Record{
		State:       idemstore.State(r.state),
		Operation:   r.operation,
		Fingerprint: r.fingerprint,
	}
	switch rec.State {
	case idemstore.StateInFlight:
		rec.LeaseRemaining = r.remaining
	case idemstore.StateCompleted:
		// A NULL status or body_omitted reads as the zero value.
		resp := &idemstore.Response{Body: r.body, Status: int(r.status), Omitted: r.omitted}
		h, err := headerwire.Decode(r.headers)
		if err != nil {
			return idemstore.Result{}, fmt.Errorf("stored headers: %w", err)
		}
		resp.Header = h
		rec.Response = resp
	}
	return idemstore.Result{Existing: rec}, nil
}

// wireDecoder decodes single values in PostgreSQL's binary format and keeps
// the first malformed one as err. A nil value is SQL NULL: it decodes to
// the zero value and false.
type wireDecoder struct{ err error }

func (d *wireDecoder) fail(what string, v []byte) {
	if d.err == nil {
		d.err = fmt.Errorf("malformed %s value of %d bytes", what, len(v))
	}
}

func (d *wireDecoder) text(v []byte) (string, bool) {
	if v == nil {
		return "", false
	}
	return string(v), true
}

func (d *wireDecoder) bytea(v []byte) []byte {
	if v == nil {
		return nil
	}
	return append([]byte{}, v...)
}

func (d *wireDecoder) int32(v []byte) (int32, bool) {
	if v == nil {
		return 0, false
	}
	if len(v) != 4 {
		d.fail("int4", v)
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(v)), true
}

// int64 decodes an int8, or a timestamptz as microseconds since 2000-01-01
// UTC (the infinities are the extreme values, which compare correctly).
func (d *wireDecoder) int64(v []byte) (int64, bool) {
	if v == nil {
		return 0, false
	}
	if len(v) != 8 {
		d.fail("8-byte", v)
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

func (d *wireDecoder) bool(v []byte) (bool, bool) {
	if v == nil {
		return false, false
	}
	if len(v) != 1 {
		d.fail("bool", v)
		return false, false
	}
	return v[0] != 0, true
}
