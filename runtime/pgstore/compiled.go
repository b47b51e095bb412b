package pgstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PL/pgSQL compiles idempotency_claim once per session, the first time
// the session calls it, and keeps what it compiled for the session's life:
// the types of its variables (v_now timestamptz, v_row
// idempotency_keys%ROWTYPE) are looked up then, through the search_path
// of the session at that moment, where a temporary type or table is found
// before pg_catalog's. It compiles the function again only when the
// function's pg_proc row has changed (a CREATE OR REPLACE, Migrate's on
// every start). A handler that has the session compile it under names of
// its own (a temporary domain named timestamptz), by calling it in its
// transaction, would leave every later claim on the connection failing
// once the domain is gone ("cache lookup failed for type"), whatever the
// session's reset undoes: no statement makes a session forget it
// (docs/semantics.md §7.2). The migration's text is released and is not
// changed (docs/compatibility.md), so pgstore keeps it from happening on
// a connection it pools:
//
//   - before a handler's transaction on a connection where pgstore has
//     not yet had the session compile the function itself, it does so,
//     and records the version of the function's row it read first
//     (claimMark, kept with the connection): a claim's transaction reads
//     it as it begins (txTimeoutsSQL), and the claim that follows in the
//     same round trip compiles the function, at no cost in statements; a
//     keyless one, whose beginning calls no claim, is preceded once per
//     connection by a claim of a key of no tenant in a transaction of
//     its own that pgstore rolls back (compileClaimSQL);
//   - after the transaction, the session check reads the row's version
//     again (sessionCheckSQL): the same version, and the session's
//     function is still the one pgstore had compiled, since PostgreSQL
//     would have compiled it anew only for another row, and a row the
//     handler changed in its transaction is gone with it or refuses its
//     commit (sameTxCheckSQL); another version, or none read, and the
//     handler may have had it compiled anew, so the connection is closed
//     rather than pooled (errClaimUnverified).
//
// The cost is a lookup of the function and its row in the beginning of a
// claim's transaction on a connection not yet marked; two round trips and
// one rolled-back claim of a key of no tenant before the first keyless
// transaction on one (BEGIN, compileClaimSQL and ROLLBACK); a lookup of
// the function's row by oid in the session check of every handler's
// transaction (docs/benchmarks.md); and
// a connection closed after the first handler's transaction on it once
// the function has changed.

// claimMarkKey is the key of a connection's claimMark in its pgconn's
// CustomData.
const claimMarkKey = "idemgen.claimCompiled"

// claimMark is the version of idempotency_claim's pg_proc row (oid, and
// claimVersionSQL's xmin and ctid) at which pgstore had a session compile
// the function itself, before any handler ran on it.
type claimMark struct {
	oid     uint32
	version string
}

// compiledClaim is what the end of a handler's transaction checks of the
// session's compiled claim: mark, when marked, and intact once the
// session check found the same version (sendEnding). putBack closes a
// connection whose claim was not found intact.
type compiledClaim struct {
	mark   claimMark
	marked bool
	intact bool
}

// errClaimUnverified is why a connection whose idempotency_claim a
// handler may have had compiled anew is closed rather than pooled.
var errClaimUnverified = fmt.Errorf("the session's compiled idempotency_claim could not be told to be pgstore's: %w", errSessionDiscarded)

// compileClaim returns what the end of a handler's transaction on pc
// checks of its compiled claim, having pgstore's own call compile it
// first where pgstore has not (compileClaimSQL): before a keyless
// transaction, whose beginning calls no claim. A compilation that fails
// (a database without the function) leaves it unmarked: the transaction
// runs, and its connection is closed after it.
func compileClaim(ctx context.Context, pc *pgx.Conn) *compiledClaim {
	if c := markedClaim(pc); c != nil {
		return c
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	key := rand.Text()
	b.Queue(compileClaimSQL, key)
	br := pc.SendBatch(ctx, b)
	var read claimRead
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&read.oid, &read.version, new(*string))
	}
	if err = errors.Join(err, br.Close(), br.Tx().Rollback(ctx)); err != nil {
		return &compiledClaim{}
	}
	return read.compiled(pc)
}

// markedClaim returns what the end of a handler's transaction on pc
// checks of its compiled claim where pgstore has already had the session
// compile it (its claimMark kept with the connection), and nil where it
// has not.
func markedClaim(pc *pgx.Conn) *compiledClaim {
	if m, ok := pc.PgConn().CustomData()[claimMarkKey].(claimMark); ok {
		return &compiledClaim{mark: m, marked: true}
	}
	return nil
}

// claimRead is idempotency_claim's oid and the version of its pg_proc
// row, read before a call of pgstore's had the session compile the
// function: by compileClaimSQL, or by txTimeoutsSQL ahead of a claim in
// the same round trip (ClaimTx). Either is nil when none was read.
type claimRead struct {
	oid     *uint32
	version *string
}

// compiled records r as pc's claimMark, once pgstore's call that followed
// the read has run, and returns what the end of a handler's transaction on
// pc checks of its compiled claim: unmarked when nothing was read.
func (r claimRead) compiled(pc *pgx.Conn) *compiledClaim {
	if r.oid == nil || r.version == nil {
		return &compiledClaim{}
	}
	m := claimMark{oid: *r.oid, version: *r.version}
	pc.PgConn().CustomData()[claimMarkKey] = m
	return &compiledClaim{mark: m, marked: true}
}

// checked reports, for the session check's last column (the version of
// the function's row it read, nil for none), whether the session's
// compiled claim is still the one pgstore had compiled.
func (c *compiledClaim) checked(version []byte) {
	if c != nil && c.marked && version != nil && string(version) == c.mark.version {
		c.intact = true
	}
}

// oid is the function's oid that the session check reads the version of,
// 0 when unmarked.
func (c *compiledClaim) oid() uint32 {
	if c == nil || !c.marked {
		return 0
	}
	return c.mark.oid
}
