//go:build !race

package fingerprint

// raceEnabled is true under the race detector, whose instrumentation
// allocates: allocation counts are not measured then.
const raceEnabled = false
