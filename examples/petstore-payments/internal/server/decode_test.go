package server

import "testing"

func TestParseIntegral(t *testing.T) {
	good := map[string]int64{
		"1000": 1000, "1e3": 1000, "1E3": 1000, "1000.0": 1000, "10000e-1": 1000,
		"0": 0, "-0": 0, "0.0e5": 0, "-25": -25, "1.5e1": 15, "999999999999999999": 999999999999999999,
		"0.001e3": 1,
	}
	for lit, want := range good {
		got, err := parseIntegral(lit)
		if err != nil || got != want {
			t.Errorf("parseIntegral(%q) = %d, %v; want %d", lit, got, err, want)
		}
	}
	for _, lit := range []string{"1000.5", "1e-1", "0.1", `"1000"`, "true", "1e19", "1e999999999999", "12345678901234567890"} {
		if got, err := parseIntegral(lit); err == nil {
			t.Errorf("parseIntegral(%q) = %d, want an error", lit, got)
		}
	}
}
