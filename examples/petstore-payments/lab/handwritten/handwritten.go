// Package handwritten is the idempotency a strong team writes by hand in a
// day, kept in the example's lab so that its benchmark compares idemgen
// with it rather than with no protection at all. It follows the
// best-known published design: a key table in PostgreSQL beside the
// business rows, the key inserted in the same transaction as the business
// writes, and the response stored in the key's row, so that a retry reads
// it back.
//
// A request first reads its key's row with one plain SELECT, outside any
// transaction: a row that is there was committed with its response (the
// key's insert and the response commit together), and is replayed. A key
// not found is inserted (INSERT … ON CONFLICT DO NOTHING) in a transaction
// that runs the handler's writes and stores the response with an UPDATE
// before it commits; BEGIN goes in one round trip with the insert, the
// UPDATE in one with the COMMIT (pgx.Batch). A concurrent duplicate's
// insert waits for the first transaction: when that commits, the insert
// does nothing and the duplicate replays the committed row; when it rolls
// back, the duplicate runs. A 5xx rolls everything back, key included, so
// that a retry runs again. The response's headers are stored byte for byte
// (names and values as bytea arrays), its body as bytea.
//
// What it lacks, each of which idemgen gives:
//
//   - no fingerprint: a key reused with another request replays the first
//     answer instead of a 422;
//   - no operation scope: keys are scoped by tenant only, so a key used
//     for a transfer and then for an adoption replays the transfer;
//   - no lease, no fencing and no 409: a duplicate of a request in flight
//     waits on the first transaction's insert, holding a pooled connection
//     and a row lock for as long as the first request's handler runs,
//     however long that is;
//   - no expiry: the table only grows;
//   - no selection of the headers a replay may carry: every header the
//     handler set is replayed;
//   - nothing for handlers that end their own transaction, or for the
//     operations that are not transactional, which run unprotected;
//   - no store but PostgreSQL.
package handwritten

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
)

// Schema creates the key table: one row per tenant and key, whose status,
// headers and body are NULL until the response is stored, which commits
// with the row itself. A header is a name and a value at the same place of
// header_names and header_values.
const Schema = `CREATE TABLE IF NOT EXISTS handwritten_idempotency_keys (
    tenant        text        NOT NULL,
    key           text        NOT NULL,
    status        int,
    header_names  bytea[],
    header_values bytea[],
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, key)
)`

// The statements of a request. pgx prepares each once per connection and
// keeps it in its statement cache.
const (
	readKey   = `SELECT status, header_names, header_values, body FROM handwritten_idempotency_keys WHERE tenant = $1 AND key = $2`
	insertKey = `INSERT INTO handwritten_idempotency_keys (tenant, key) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	storeKey  = `UPDATE handwritten_idempotency_keys SET status = $3, header_names = $4, header_values = $5, body = $6 WHERE tenant = $1 AND key = $2`
)

// maxKeyLength bounds a key, as the spec's Idempotency-Key header does.
const maxKeyLength = 255

// Migrate creates the key table if it does not exist.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("create the hand-written key table: %w", err)
	}
	return nil
}

// Mount mounts each transactional operation on the key table in pool,
// scoping keys by the tenant of the request.
func Mount(pool *pgxpool.Pool) server.TxMount {
	return func(_ string, h server.TxHandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serve(pool, h, w, r)
		})
	}
}

// stored is a response as the key's row holds it.
type stored struct {
	status        int32
	names, values [][]byte
	body          []byte
}

func serve(pool *pgxpool.Pool, h server.TxHandlerFunc, w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > maxKeyLength {
		http.Error(w, "an Idempotency-Key of 1 to 255 characters is required", http.StatusBadRequest)
		return
	}
	tenant, _ := server.TenantFromRequest(r)
	// As without idempotency, the work is finished even when the client
	// has gone: its retry then finds the stored response.
	ctx := context.WithoutCancel(r.Context())
	prev, found, err := read(ctx, pool, tenant, key)
	if err != nil {
		http.Error(w, "the database is not available", http.StatusServiceUnavailable)
		return
	}
	if found {
		replay(w, prev)
		return
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		http.Error(w, "the database is not available", http.StatusServiceUnavailable)
		return
	}
	// A connection released inside a transaction (after a failure the
	// ROLLBACK below could not end) is closed by the pool, not reused.
	defer conn.Release()
	run(ctx, conn, h, w, r, tenant, key)
}

// run runs a key not found completed: inserts it, runs the handler and
// stores its response in one transaction on conn, or replays the response
// of a duplicate that committed first.
func run(ctx context.Context, conn *pgxpool.Conn, h server.TxHandlerFunc, w http.ResponseWriter, r *http.Request, tenant, key string) {
	// open says whether the transaction may still be open, and must then
	// be rolled back.
	open := true
	defer func() {
		if open {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
	}()
	inserted, err := begin(ctx, conn, tenant, key)
	if err != nil {
		http.Error(w, "the database failed", http.StatusInternalServerError)
		return
	}
	if !inserted {
		// A duplicate committed the key while this request's insert
		// waited: its row is complete.
		open = false
		prev, found, err := rollbackAndRead(ctx, conn, tenant, key)
		if err != nil || !found {
			http.Error(w, "the database failed", http.StatusInternalServerError)
			return
		}
		replay(w, prev)
		return
	}
	rec := httptest.NewRecorder()
	h(rec, r.WithContext(ctx), database.Pgx(conn))
	if rec.Code >= 500 {
		// Rolled back by the deferred call, key and all.
		copyResponse(w, rec.Header(), rec.Code, rec.Body.Bytes())
		return
	}
	err = complete(ctx, conn, tenant, key, rec)
	open = err != nil
	if err != nil {
		http.Error(w, "the transaction did not commit; nothing was changed", http.StatusInternalServerError)
		return
	}
	copyResponse(w, rec.Header(), rec.Code, rec.Body.Bytes())
}

// rowQuerier is what *pgxpool.Pool and batchRow have in common.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// read returns the key's row, complete whenever it is there.
func read(ctx context.Context, q rowQuerier, tenant, key string) (stored, bool, error) {
	var s stored
	err := q.QueryRow(ctx, readKey, tenant, key).Scan(&s.status, &s.names, &s.values, &s.body)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("read key: %w", err)
	}
	return s, true, nil
}

// begin opens a transaction on conn and inserts the key in it, in one round
// trip, and reports whether the insert made the row.
func begin(ctx context.Context, conn *pgxpool.Conn, tenant, key string) (bool, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(insertKey, tenant, key)
	res := conn.SendBatch(ctx, b)
	_, err := res.Exec()
	var inserted int64
	if err == nil {
		tag, ierr := res.Exec()
		inserted, err = tag.RowsAffected(), ierr
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("insert key: %w", err)
	}
	return inserted == 1, nil
}

// rollbackAndRead ends the transaction whose insert did nothing and reads
// the row a duplicate committed, in one round trip.
func rollbackAndRead(ctx context.Context, conn *pgxpool.Conn, tenant, key string) (stored, bool, error) {
	b := &pgx.Batch{}
	b.Queue("ROLLBACK")
	b.Queue(readKey, tenant, key)
	res := conn.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return stored{}, false, fmt.Errorf("rollback: %w", err)
	}
	return read(ctx, batchRow{res}, tenant, key)
}

// batchRow reads the next result of a batch as a row.
type batchRow struct{ res pgx.BatchResults }

func (b batchRow) QueryRow(context.Context, string, ...any) pgx.Row { return b.res.QueryRow() }

// complete stores rec in the key's row and commits it with the handler's
// writes, in one round trip.
func complete(ctx context.Context, conn *pgxpool.Conn, tenant, key string, rec *httptest.ResponseRecorder) error {
	var names, values [][]byte
	for name, vs := range rec.Header() {
		for _, v := range vs {
			names, values = append(names, []byte(name)), append(values, []byte(v))
		}
	}
	b := &pgx.Batch{}
	b.Queue(storeKey, tenant, key, int32(rec.Code), names, values, rec.Body.Bytes())
	b.Queue("COMMIT")
	res := conn.SendBatch(ctx, b)
	_, err := res.Exec()
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = res.Exec()
		// COMMIT of a transaction a failed statement aborted answers
		// ROLLBACK, without an error.
		if err == nil && tag.String() != "COMMIT" {
			err = errors.New("the transaction was rolled back")
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store response and commit: %w", err)
	}
	return nil
}

// replay answers with a stored response, marked as a replay.
func replay(w http.ResponseWriter, s stored) {
	h := http.Header{}
	for i := range s.names {
		name := string(s.names[i])
		h[name] = append(h[name], string(s.values[i]))
	}
	h.Set("Idempotent-Replayed", "true")
	copyResponse(w, h, int(s.status), s.body)
}

func copyResponse(w http.ResponseWriter, h http.Header, status int, body []byte) {
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
