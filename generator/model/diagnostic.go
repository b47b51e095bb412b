package model

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/spectext"
)

// String renders the position the way compilers do: "file:line:col", or
// "file:line" and "file" when the column or line is unknown.
func (p Pos) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
		if p.Col > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(p.Col))
		}
	}
	return b.String()
}

// String returns "error" or "warning".
func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// String renders the diagnostic on one line, in the form editors and CI
// log parsers recognise (the C compilers' form: position, then severity):
//
//	openapi.yaml:41:9: error: POST /transfers (createTransfer): x-idempotency.ttl: "7 days" is not a duration (use 7d, 24h, 90m)
//
// The operation and field parts are left out when empty. Every part may
// quote the spec, and passes through spectext.Visible: a line break or an
// escape sequence in an operationId would otherwise print a line of the
// spec's choosing to a terminal or a CI log (a forged workflow command,
// a forged summary).
func (d Diagnostic) String() string {
	var b strings.Builder
	b.WriteString(spectext.Visible(d.Pos.String()))
	b.WriteString(": ")
	b.WriteString(d.Severity.String())
	b.WriteString(": ")
	if d.Operation != "" {
		b.WriteString(spectext.Visible(d.Operation))
		b.WriteString(": ")
	}
	if d.Field != "" {
		b.WriteString(spectext.Visible(d.Field))
		b.WriteString(": ")
	}
	b.WriteString(spectext.Visible(d.Message))
	return b.String()
}

// CompareDiagnostics orders errors before warnings, so that what stops
// generation is read first, then each by file, line, column and message;
// the remaining fields only break ties, so that the order is total and
// output is deterministic.
func CompareDiagnostics(a, b Diagnostic) int {
	return cmp.Or(
		cmp.Compare(a.Severity, b.Severity),
		cmp.Compare(a.Pos.File, b.Pos.File),
		cmp.Compare(a.Pos.Line, b.Pos.Line),
		cmp.Compare(a.Pos.Col, b.Pos.Col),
		cmp.Compare(a.Message, b.Message),
		cmp.Compare(a.Operation, b.Operation),
		cmp.Compare(a.Field, b.Field),
	)
}

// SortDiagnostics sorts ds in place by CompareDiagnostics.
func SortDiagnostics(ds []Diagnostic) {
	slices.SortStableFunc(ds, CompareDiagnostics)
}

// HasErrors reports whether any diagnostic in ds is an Error.
func HasErrors(ds []Diagnostic) bool {
	for _, d := range ds {
		if d.Severity == Error {
			return true
		}
	}
	return false
}

// CountErrors returns how many diagnostics in ds are errors and how many are
// warnings, for summaries such as "3 errors, 1 warning".
func CountErrors(ds []Diagnostic) (errors, warnings int) {
	for _, d := range ds {
		if d.Severity == Error {
			errors++
		} else {
			warnings++
		}
	}
	return errors, warnings
}
