package storetest

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

// StatementLog records the statements a store sends, for tests that count
// them; it is safe for concurrent use.
type StatementLog struct {
	mu    sync.Mutex
	stmts []string
}

// Add records one statement, its white space collapsed.
func (l *StatementLog) Add(query string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stmts = append(l.stmts, strings.Join(strings.Fields(query), " "))
}

// Len reports how many statements have been recorded.
func (l *StatementLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.stmts)
}

// Since returns the statements recorded after the first n.
func (l *StatementLog) Since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.stmts[n:])
}

// CheckStatements fails the test unless the request path sent as many
// statements as want holds, each starting with the text of want in its
// place.
func CheckStatements(t *testing.T, path string, got, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("%s: %d statements:\n  %s\nwant %d, starting:\n  %s", path, len(got), strings.Join(got, "\n  "), len(want), strings.Join(want, "\n  "))
	}
}
