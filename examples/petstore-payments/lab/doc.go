// Package lab is the example's benchmark lab, kept apart from the service
// so that a reader of the example meets a payments service: the key table
// a team would write by hand (handwritten), the replay of a day of
// retrying clients (dayreplay), the fake payment processor (processor),
// their commands (cmd/petstore-lab, cmd/dayreplay, cmd/processor), and
// the harness that runs the example's servers in tests (labtest).
//
// Its tests are the lab's days and benchmarks against the built servers:
// the small day and the short storm run with go test; the full-size days
// build only with the tag soak (go test -tags soak), and the benchmark
// BenchmarkTransferIdempotency compares idemgen with the hand-written
// table and with no protection.
package lab
