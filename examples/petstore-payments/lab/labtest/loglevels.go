package labtest

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// LogLine is one line of a server's log: its level and message.
type LogLine struct {
	Level, Msg string
}

// logLine finds the level and message of one line of the server's log
// (log/slog's text handler: time=… level=WARN msg="…" …).
var logLine = regexp.MustCompile(`level=(\S+) msg=("(?:[^"\\]|\\.)*"|\S+)`)

// LogLines parses a server's log (Server.Logs); lines that are not
// log/slog's are left out.
func LogLines(logs string) []LogLine {
	var out []LogLine
	for _, line := range strings.Split(logs, "\n") {
		m := logLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		msg := m[2]
		if unq, err := strconv.Unquote(msg); err == nil {
			msg = unq
		}
		out = append(out, LogLine{Level: m[1], Msg: msg})
	}
	return out
}

// LevelCounts counts the lines of logs at level (WARN, ERROR), by message,
// as "message×count" sorted by message; nil when there are none.
func LevelCounts(logs, level string) []string {
	counts := map[string]int{}
	for _, l := range LogLines(logs) {
		if l.Level == level {
			counts[l.Msg]++
		}
	}
	var out []string
	for msg, n := range counts {
		out = append(out, fmt.Sprintf("%s×%d", msg, n))
	}
	sort.Strings(out)
	return out
}
