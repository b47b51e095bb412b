//go:build !idemwork

package work

// Add counts n steps. Without the idemwork tag it does nothing, and a call
// to it, its argument included, compiles to nothing.
func Add(n int) {}
