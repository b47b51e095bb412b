package load

import (
	"fmt"
	"strings"
	"testing"
)

// aliasLevels returns a document of n anchors, each an object of two
// aliases to the one before: expanded, the last holds about 2^n nodes.
func aliasLevels(n int) string {
	var b strings.Builder
	b.WriteString("l0: &l0 {type: string}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "l%d: &l%d {a: *l%d, b: *l%d}\n", i, i, i-1, i-1)
	}
	return b.String()
}

// YAML aliases are decoded as copies by every reader of a spec, so a
// document whose aliases name aliases is refused once it expands past a
// bound that grows with its own size, and the refusal takes no longer
// than the document is to read, however far the aliases would expand.
// Anchors used as they are meant to (one part named from many places)
// load.
func TestParseTreeBoundsAliasExpansion(t *testing.T) {
	if _, err := parseTree([]byte(aliasLevels(12)), "t.yaml"); err != nil {
		t.Errorf("12 levels of aliases (about 16,000 nodes expanded): %v", err)
	}
	for _, n := range []int{18, 200} {
		_, err := parseTree([]byte(aliasLevels(n)), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), "its YAML aliases expand") || !strings.Contains(err.Error(), `anchor "l`) {
			t.Errorf("%d levels of aliases: %v, want a refusal that names an anchor", n, err)
		}
	}
	var b strings.Builder
	b.WriteString("shared: &errors\n")
	for i := range 10 {
		fmt.Fprintf(&b, "  \"%d\": {description: failure %d, content: {application/json: {schema: {type: object}}}}\n", 400+i, i)
	}
	b.WriteString("paths:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  /p%d: {post: {operationId: p%d, responses: {<<: *errors, \"200\": {description: ok}}}}\n", i, i)
	}
	if _, err := parseTree([]byte(b.String()), "t.yaml"); err != nil {
		t.Errorf("one set of ten responses named from 1,000 operations: %v", err)
	}
}
