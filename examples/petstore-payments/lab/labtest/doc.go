// Package labtest runs the example's servers for tests: it builds the
// service, the lab's server and the fake payment processor once for a
// test binary (Run), starts them on loopback ports (Binaries.StartServer,
// Binaries.StartLab, Launch), sends requests as a tenant (Client), makes a
// fresh database for a test (Databases, SQLiteURL, PostgresURL), and plays
// the small day of the lab's replay (SmallDay, PlayDay, CheckSafe). The
// service's own tests and the lab's days and benchmarks share it.
package labtest
