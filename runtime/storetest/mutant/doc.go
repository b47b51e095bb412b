// Package mutant is the mutation run of the store suites: deliberately
// broken versions of a store (commit then report an error, complete
// without the fence, release a completed row, lose an update, a guard that
// never releases, and a store's own, such as a session reset that skips
// one kind of state), each of which the conformance suite, the
// model-based test or the linearizability check must catch. A check that
// passes a broken store could not fail where it matters.
//
// The mutants wrap the real store (Mutant.Wrap): every call passes through
// except those the mutant changes. A store's tests hand Run their
// storetest.Target and the cases that apply to them; Run runs each
// checker against the broken store in a child process of the test binary
// and fails when one passes. docs/verification.md reports the score.
package mutant
