// Package walmeasure holds no code, only a benchmark: how many bytes of
// write-ahead log PostgreSQL writes for one idempotency key through
// pgstore's public API, on the non-transactional path (claim, then
// completion), the transactional one (claim and completion in one
// transaction) and the sweep that deletes the key when it expires. The
// figures feed the capacity arithmetic in docs/scaling.md.
//
//	IDEMGEN_TEST_DATABASE_URL=postgres://… go test ./runtime/internal/walmeasure/ -run '^$' -bench . -benchtime 10000x -count 3
//
// The WAL position is the whole server's, so any other write on the
// server during a run counts too: take the smallest of several runs.
package walmeasure
