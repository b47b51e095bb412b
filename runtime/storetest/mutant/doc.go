// Package mutant is the mutation run of the store suites: deliberately
// broken versions of a store (commit then report an error, complete
// without the fence, release a completed row, lose an update, a guard that
// never releases, a lease kept in whole seconds, a TTL capped, a body cut
// short, identity fields joined, a racy takeover, a recovery point's ttl
// capped, and a store's own, such as a session reset that skips one kind
// of state), each of which the conformance suites, the model-based test,
// the phase suite or the linearizability check must catch. A check that
// passes a broken store could not fail where it matters.
//
// The mutants wrap the real store (Mutant.Wrap): every call passes through
// except those the mutant changes. A store's tests hand Run their
// storetest.Target and the cases that apply to them (Cases, which gives
// each mutant the checkers that can see it, Checker.For); Run runs each
// checker against the broken store in a child process of the test binary
// and fails when one passes, when a mutant does not apply to the store,
// or when a checker fails the store wrapped by Unchanged. A child counts
// as a catch only when it reports that a subtest of its checker failed.
// docs/verification.md reports the score.
package mutant
