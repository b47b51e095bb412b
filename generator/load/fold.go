package load

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/generator/model"
)

// One cause, one message: a fault of a schema or a request body that many
// operations share is found once per operation, and a schema name that
// does not resolve is met at every $ref that spells it. The loader says
// each once, where the fix goes, and names or counts the rest.

// brokenRefWarnings warns once per target about the $refs that do not
// resolve and that nothing idemgen generates needed: at the first $ref,
// with the lines of the others. A target some operation did need has been
// reported as an error, and fixing it fixes every use, so it gets no
// warning besides.
func (l *loader) brokenRefWarnings() {
	type target struct {
		first brokenRef
		lines []int
	}
	var order []string
	targets := map[string]*target{}
	needed := map[string]bool{}
	for _, r := range l.t.refs {
		if r.used {
			needed[r.ref] = true
			continue
		}
		t, ok := targets[r.ref]
		if !ok {
			targets[r.ref] = &target{first: r}
			order = append(order, r.ref)
			continue
		}
		t.lines = append(t.lines, r.pos.Line)
	}
	for _, ref := range order {
		if needed[ref] {
			continue
		}
		t := targets[ref]
		uses := ""
		if len(t.lines) > 0 {
			uses = fmt.Sprintf(" (used %d times: here and on %s)", len(t.lines)+1, lineList(t.lines))
		}
		l.diags = append(l.diags, model.Diagnostic{
			Severity: model.Warning,
			Pos:      t.first.pos,
			Message:  fmt.Sprintf("$ref %q %s; ignored, since nothing idemgen generates depends on it%s", ref, t.first.reason, uses),
		})
	}
}

// shownLines is how many line numbers lineList spells out.
const shownLines = 8

// lineList spells line numbers for a message: "line 40", "lines 40, 57
// and 80", or the first few and how many more.
func lineList(lines []int) string {
	if len(lines) == 1 {
		return "line " + strconv.Itoa(lines[0])
	}
	var s []string
	for _, n := range lines[:min(len(lines), shownLines)] {
		s = append(s, strconv.Itoa(n))
	}
	if len(lines) > shownLines {
		return "lines " + strings.Join(s, ", ") + fmt.Sprintf(" and %d more", len(lines)-shownLines)
	}
	return "lines " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// shownOperations is how many operations foldOperations names before it
// counts the rest.
const shownOperations = 3

// foldOperations merges diagnostics that say the same thing at the same
// place for several operations into one that names them: a shared schema
// or request body is one thing to fix. Exact repeats are dropped. The first
// of each group keeps its place in ds.
func foldOperations(ds []model.Diagnostic) []model.Diagnostic {
	type cause struct {
		sev            model.Severity
		pos            model.Pos
		field, message string
	}
	at := map[cause]int{}
	ops := map[cause][]string{}
	out := ds[:0]
	for _, d := range ds {
		c := cause{d.Severity, d.Pos, d.Field, d.Message}
		if _, seen := at[c]; !seen {
			at[c] = len(out)
			out = append(out, d)
			ops[c] = []string{d.Operation}
			continue
		}
		if !slices.Contains(ops[c], d.Operation) {
			ops[c] = append(ops[c], d.Operation)
		}
	}
	for c, names := range ops {
		if len(names) > 1 {
			out[at[c]].Operation = operationList(names)
		}
	}
	return out
}

// operationList names the operations of a folded diagnostic: all of them
// up to shownOperations, else the first ones and how many more.
func operationList(names []string) string {
	if len(names) <= shownOperations {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:shownOperations], ", ") + fmt.Sprintf(" and %d more operations", len(names)-shownOperations)
}
