// Package overhead holds no code, only a benchmark and the test that keeps
// it working: what one protected request costs, per store, against the
// same handler unprotected. Both sides are served over real HTTP on
// loopback (net/http's server and client), the protected one through the
// engine's middleware over each store: in memory, SQLite, PostgreSQL and
// Redis. The handler is the same on both sides and for every store, a
// non-transactional one (it reads the body and answers 201 with a small
// JSON transfer), so that the stores are compared on the same work. A
// fifth row, postgres-tx, is PostgreSQL's transactional path: the handler
// also inserts the transfer, unprotected between a BEGIN and a COMMIT of
// its own, protected in the transaction that claimed the key and commits
// with its completion.
//
//	IDEMGEN_TEST_DATABASE_URL=postgres://… IDEMGEN_TEST_REDIS_URL=redis://… \
//	  go test ./runtime/internal/overhead -run '^$' -bench StoreOverhead -benchtime 7x
//
// -benchtime Nx is the number of rounds. docs/benchmarks.md ("What one
// protected request costs, per store") publishes the figures and how they
// were taken. Without a database or Redis URL their rows are skipped.
package overhead
