package dayreplay

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// statusCounts counts answers by status code; it is safe for concurrent
// use.
type statusCounts struct {
	mu sync.Mutex
	n  map[int]int64
}

func (c *statusCounts) add(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int]int64{}
	}
	c.n[code]++
}

// String lists the counts in order of status code, as "201×2900 409×12".
func (c *statusCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	codes := make([]int, 0, len(c.n))
	for code := range c.n {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	parts := make([]string, 0, len(codes))
	for _, code := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", code, c.n[code]))
	}
	return strings.Join(parts, " ")
}

// attemptLog records how each attempt under a key ended, and when it was
// sent; it is safe for concurrent use.
type attemptLog struct {
	mu    sync.Mutex
	start map[string]time.Time
	log   map[string][]string
	// odd holds the transfer keys with an attempt answered otherwise than
	// a transfer may be: 201, 409 or 503 (amount changes, logged under
	// their key and "#changed", are answered 422).
	odd map[string]bool
}

// expected are the answers a transfer's attempt may get.
var expected = map[string]bool{"201": true, "409": true, "503": true, "timeout": true, "error": true}

func (l *attemptLog) add(key string, sent time.Time, ending string) {
	if key == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.log == nil {
		l.start, l.log, l.odd = map[string]time.Time{}, map[string][]string{}, map[string]bool{}
	}
	status, _, _ := strings.Cut(ending, " ")
	if !expected[status] && !strings.HasSuffix(key, "#changed") {
		l.odd[key] = true
	}
	first, ok := l.start[key]
	if !ok {
		first = sent
		l.start[key] = sent
	}
	at := sent.Sub(first).Round(10 * time.Millisecond)
	l.log[key] = append(l.log[key], fmt.Sprintf("%v %s", at, ending))
}

// of lists the attempts under key, as "0s timeout, 80ms 409, 1.2s 201".
func (l *attemptLog) of(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.log[key], ", ")
}

// unexpected lists the transfers with an attempt answered otherwise than a
// transfer may be, each with every attempt, in key order.
func (l *attemptLog) unexpected() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for key := range l.odd {
		out = append(out, key+": "+strings.Join(l.log[key], ", "))
	}
	slices.Sort(out)
	return out
}
