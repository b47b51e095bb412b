// Package storetest is the conformance suite every idemstore.Store passes, and
// the one description of a store under test that every suite for stores
// reads. It is for the author of a store: the store's own tests build a
// Target (how to open a fresh store, and what it offers beyond idemstore.Store)
// and hand it to Run, and to RunTx for an idemstore.Transactor; the suite then
// checks the claim, completion, fencing and expiry rules that the engine
// relies on.
//
// The same Target goes to the other suites, each a package of its own:
//
//   - storetest/model drives a store through long random sequences and
//     compares every answer with an executable model of the contract;
//   - storetest/enginetest mounts an idem.Engine in front of a store on a
//     loopback HTTP server, for a store's engine tests and for the
//     engine's transactional scenarios and secrets check;
//   - storetest/proc runs the halves of tests that need more than one
//     process (claims racing across processes, a child that dies);
//   - storetest/lincheck checks histories of a service under faults;
//   - storetest/mutant breaks a store on purpose, in each of the ways a
//     store can break, and requires the suites above to fail it;
//   - idemadmin/admintest is the operator's suite, for a store that is an
//     idemadmin.Store too.
//
// Most of the suite measures leases and TTLs in real time, on the store's
// own clock. Durations are a few hundred milliseconds with generous
// margins, and the subtests that sleep run in parallel, so one store takes
// a few seconds. The subtests whose times a real clock cannot give cheaply
// (a lease of 1.5 s checked at 1.2 s, a TTL of a day read back after
// hours) open their store on a Clock the test moves, which a database's
// store follows through Instance.SetClock.
package storetest
