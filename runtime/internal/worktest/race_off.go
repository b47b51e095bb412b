//go:build !race

package worktest

// raceEnabled is true under the race detector (see Sizes).
const raceEnabled = false
