//go:build race

package mutant

const raceEnabled = true
