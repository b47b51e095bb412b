package spectext

import "testing"

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                     "plain",
		"  two\n\r\n lines\u2028 ":  "two lines",
		"evil\u202Etxt.exe":         `evil\u202Etxt.exe`,
		"\u2066x\u2069\u200b\ufeff": `\u2066x\u2069\u200B\uFEFF`,
		"nul\x00esc\x1b":            `nul\u0000esc\u001B`,
		"bad\xffutf8":               "bad\ufffdutf8",
		"支払い é":                     "支払い é",
	} {
		if got := Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
}
