package describe

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

func TestWords(t *testing.T) {
	for d, want := range map[time.Duration]string{
		7 * 24 * time.Hour:      "7 days",
		24 * time.Hour:          "24 hours",
		36 * time.Hour:          "36 hours",
		time.Hour:               "1 hour",
		90 * time.Minute:        "90 minutes",
		60 * time.Second:        "1 minute",
		15 * time.Second:        "15 seconds",
		1500 * time.Millisecond: "1.5s",
	} {
		if got := Words(d); got != want {
			t.Errorf("Words(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{
		1 << 20: "1 MiB", 64 << 10: "64 KiB", 2 << 30: "2 GiB", 1000: "1000 bytes", 1: "1 byte", 1536: "1536 bytes",
	} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSummary(t *testing.T) {
	p := model.Policy{KeyIn: key.InQuery, KeyName: "rid", Scope: "tenant", TTL: 48 * time.Hour, Required: true}
	want := "a required key in the rid query parameter, unique per tenant across operations, remembered for 2 days"
	if got := Summary(p); got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}
