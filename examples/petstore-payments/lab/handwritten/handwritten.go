// Package handwritten is the idempotency a careful team writes by hand in a
// day, kept beside the example so that its benchmark can compare idemgen
// with it rather than with no protection at all. It follows the best-known
// published design: a key table in PostgreSQL beside the business rows,
// the key inserted in the same transaction as the business writes, and
// the response stored in the key's row, so that a retry reads it back.
//
// In one transaction a request inserts its key (INSERT … ON CONFLICT DO
// NOTHING), locks the key's row (SELECT … FOR UPDATE), and then either
// finds a stored response and replays it, or runs the handler's writes,
// stores the response in the row and commits. A concurrent duplicate
// waits on the row lock and then replays. A 5xx rolls everything back,
// key included, so that a retry runs again.
//
// What it leaves out is what idemgen adds: no fingerprint (a key reused
// with another body replays the first answer), no lease or fencing (a
// duplicate waits for the first request however long it takes, instead of
// answering 409), no selection of the headers a replay may carry, no
// expiry, and nothing for handlers that end their own transaction.
package handwritten

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
)

// Schema creates the key table: one row per tenant and key, whose status,
// headers and body are NULL until the response is stored.
const Schema = `CREATE TABLE IF NOT EXISTS handwritten_idempotency_keys (
    tenant     text        NOT NULL,
    key        text        NOT NULL,
    status     int,
    headers    jsonb,
    body       bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, key)
)`

// The statements of a request. pgx prepares each once per connection and
// keeps it in its statement cache.
const (
	insertKey = `INSERT INTO handwritten_idempotency_keys (tenant, key) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	lockKey   = `SELECT status, headers, body FROM handwritten_idempotency_keys WHERE tenant = $1 AND key = $2 FOR UPDATE`
	storeKey  = `UPDATE handwritten_idempotency_keys SET status = $3, headers = $4, body = $5 WHERE tenant = $1 AND key = $2`
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
	status  *int32
	headers []byte
	body    []byte
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
	tx, err := pool.Begin(ctx)
	if err != nil {
		http.Error(w, "the database is not available", http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	prev, err := claim(ctx, tx, tenant, key)
	if err != nil {
		http.Error(w, "the database failed", http.StatusInternalServerError)
		return
	}
	if prev.status != nil {
		replay(w, prev)
		return
	}
	rec := httptest.NewRecorder()
	h(rec, r.WithContext(ctx), database.Pgx(tx))
	if rec.Code >= 500 {
		// Rolled back by the deferred call, key and all.
		copyResponse(w, rec.Header(), rec.Code, rec.Body.Bytes())
		return
	}
	if err := complete(ctx, tx, tenant, key, rec); err != nil {
		http.Error(w, "the transaction did not commit; nothing was changed", http.StatusInternalServerError)
		return
	}
	copyResponse(w, rec.Header(), rec.Code, rec.Body.Bytes())
}

// claim inserts the key unless it exists, locks its row, and returns what
// the row holds: a stored response, or none for a key of its own.
func claim(ctx context.Context, tx pgx.Tx, tenant, key string) (stored, error) {
	var s stored
	if _, err := tx.Exec(ctx, insertKey, tenant, key); err != nil {
		return s, fmt.Errorf("insert key: %w", err)
	}
	if err := tx.QueryRow(ctx, lockKey, tenant, key).Scan(&s.status, &s.headers, &s.body); err != nil {
		return s, fmt.Errorf("lock key: %w", err)
	}
	return s, nil
}

// complete stores rec in the key's row and commits it with the handler's
// writes.
func complete(ctx context.Context, tx pgx.Tx, tenant, key string, rec *httptest.ResponseRecorder) error {
	headers, err := json.Marshal(rec.Header())
	if err != nil {
		return fmt.Errorf("encode headers: %w", err)
	}
	if _, err := tx.Exec(ctx, storeKey, tenant, key, int32(rec.Code), headers, rec.Body.Bytes()); err != nil {
		return fmt.Errorf("store response: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// replay answers with a stored response, marked as a replay.
func replay(w http.ResponseWriter, s stored) {
	var h http.Header
	if err := json.Unmarshal(s.headers, &h); err != nil {
		http.Error(w, "the stored response is unreadable", http.StatusInternalServerError)
		return
	}
	h.Set("Idempotent-Replayed", "true")
	copyResponse(w, h, int(*s.status), s.body)
}

func copyResponse(w http.ResponseWriter, h http.Header, status int, body []byte) {
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
