// Package work counts the steps of the algorithms that read what a client
// or a spec chose (a request's path, headers and body; a spec's schemas),
// for the tests that hold their work linear in their input
// (docs/verification.md).
//
// The algorithms call [Add] where they take steps. In an ordinary build Add
// does nothing and compiles to nothing: no request pays for the count, no
// signature on the request path carries a counter, and the package holds
// no state. Built with the idemwork tag, Add counts into one counter of
// the process, and Count reports the steps a call took. The tests that
// count are built with that tag only: CI runs every package that has one
// (.ci/run), and the README's command names them all
// (TestReadmeRunsEveryWorkTest).
package work
