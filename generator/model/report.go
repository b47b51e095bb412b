package model

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Warnings says how much of a report's warnings Report.Write shows.
type Warnings int

// The ways to show warnings; the zero value shows them all.
const (
	// WarningsAll prints every warning, after the errors.
	WarningsAll Warnings = iota
	// WarningsSummary prints none but counts them in the summary line.
	WarningsSummary
	// WarningsOff neither prints nor counts them.
	WarningsOff
)

// warningsNames spell the Warnings values in their order, as the command
// line takes them.
var warningsNames = []string{"all", "summary", "off"}

// ParseWarnings reads "all", "summary" or "off".
func ParseWarnings(s string) (Warnings, error) {
	if i := slices.Index(warningsNames, s); i >= 0 {
		return Warnings(i), nil
	}
	return WarningsAll, fmt.Errorf("%q is not a warnings mode (use off, summary or all)", s)
}

// String returns the name ParseWarnings reads.
func (w Warnings) String() string {
	if int(w) >= 0 && int(w) < len(warningsNames) {
		return warningsNames[w]
	}
	return "Warnings(" + strconv.Itoa(int(w)) + ")"
}

// Report is what checking a spec found: its diagnostics and how many
// operations opt in to a policy, errors or not.
type Report struct {
	// Source is the spec path as the diagnostics show it.
	Source      string
	Diagnostics []Diagnostic
	Operations  int
}

// Write prints the report the way validate and generate both print it:
// every error, then the warnings as show says, one per line
// (Diagnostic.String), then one summary line such as
//
//	12 errors, 28 warnings in 131 operations of api/openapi.yaml
//
// The summary ends every report, an empty one too, so that a run always
// says what it looked at.
func (r Report) Write(w io.Writer, show Warnings) error {
	ds := slices.Clone(r.Diagnostics)
	SortDiagnostics(ds)
	var b strings.Builder
	for _, d := range ds {
		if d.Severity == Warning && show != WarningsAll {
			continue
		}
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	b.WriteString(r.Summary(show))
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// Summary is Write's last line: the errors and warnings counted, and the
// operations and spec they were found in.
func (r Report) Summary(show Warnings) string {
	errs, warns := CountErrors(r.Diagnostics)
	s := count(errs, "error")
	switch show {
	case WarningsAll:
		s += ", " + count(warns, "warning")
	case WarningsSummary:
		s += ", " + count(warns, "warning")
		if warns > 0 {
			s += " (not shown)"
		}
	}
	s += " in " + count(r.Operations, "operation")
	if r.Source != "" {
		s += " of " + r.Source
	}
	return s
}

// count spells n things: "1 error", "0 errors", "12 errors".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
