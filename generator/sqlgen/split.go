package sqlgen

import (
	"errors"
	"strings"
	"unicode"
)

// Statement is one SQL statement of a script, with the comments that
// precede it.
type Statement struct {
	// Text is the statement, its leading comments and its final semicolon,
	// without surrounding blank lines.
	Text string
	// Compound is true when the statement holds semicolons of its own, in
	// a dollar-quoted body or a trigger's BEGIN … END, so a tool that
	// splits on semicolons would cut it apart.
	Compound bool
}

// Split cuts a PostgreSQL or SQLite script into statements. It knows
// enough SQL to find the semicolons that end statements: quoted strings
// and identifiers, line and block comments, dollar quoting, and the
// BEGIN … END body of CREATE TRIGGER (with CASE … END inside it). A
// trailing part without a semicolon that holds only comments is kept
// with the last statement.
func Split(sql string) ([]Statement, error) {
	var stmts []Statement
	start := 0
	inner := false // a semicolon inside the current statement
	trigger := false
	depth := 0 // open BEGIN/CASE blocks inside a trigger
	words := 0 // words seen in the current statement
	var head []string
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 1
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				return nil, errors.New("unterminated /* comment")
			}
			i += 2 + j + 2
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for {
				k := strings.IndexByte(sql[j:], c)
				if k < 0 {
					return nil, errors.New("unterminated quoted string")
				}
				j += k + 1
				// A doubled quote is an escaped one.
				if j < len(sql) && sql[j] == c {
					j++
					continue
				}
				break
			}
			i = j
		case c == '$':
			tag, ok := dollarTag(sql[i:])
			if !ok {
				i++
				continue
			}
			end := strings.Index(sql[i+len(tag):], tag)
			if end < 0 {
				return nil, errors.New("unterminated dollar-quoted string " + tag)
			}
			if strings.Contains(sql[i+len(tag):i+len(tag)+end], ";") {
				inner = true
			}
			i += len(tag) + end + len(tag)
		case isWordStart(c):
			j := i
			for j < len(sql) && isWordPart(sql[j]) {
				j++
			}
			w := strings.ToUpper(sql[i:j])
			words++
			if len(head) < 3 {
				head = append(head, w)
				// CREATE [TEMP|TEMPORARY] TRIGGER
				if head[0] == "CREATE" && w == "TRIGGER" {
					trigger = true
				}
			}
			if trigger {
				switch w {
				case "BEGIN", "CASE":
					depth++
				case "END":
					if depth > 0 {
						depth--
					}
				}
			}
			i = j
		case c == ';':
			if trigger && depth > 0 {
				inner = true
				i++
				continue
			}
			i++
			stmts = append(stmts, Statement{Text: strings.TrimSpace(sql[start:i]), Compound: inner})
			start, inner, trigger, depth, words, head = i, false, false, 0, 0, nil
		default:
			i++
		}
	}
	rest := strings.TrimSpace(sql[start:])
	if rest != "" {
		if words > 0 {
			// The last statement may omit its semicolon.
			stmts = append(stmts, Statement{Text: rest + ";", Compound: inner})
		} else if len(stmts) > 0 {
			stmts[len(stmts)-1].Text += "\n\n" + rest
		} else {
			stmts = append(stmts, Statement{Text: rest})
		}
	}
	return stmts, nil
}

// dollarTag returns the $tag$ that s starts with, if any.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		if c == '$' {
			return s[:j+1], true
		}
		if !(c == '_' || unicode.IsLetter(rune(c)) || (j > 1 && unicode.IsDigit(rune(c)))) {
			return "", false
		}
	}
	return "", false
}

func isWordStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isWordPart(c byte) bool {
	return isWordStart(c) || (c >= '0' && c <= '9') || c == '$'
}

// SameStatements reports whether two migrations run the same SQL: equal
// once their comment lines (lines that start with --, after indentation)
// are dropped. A migration whose comments alone changed between idemgen
// versions is the same migration to every tool idemgen writes for, none
// of which checksums a file. The comment lines a tool reads are kept
// (isDirective): goose's and dbmate's annotations say which statements
// run up and which down, so one moved changes what is applied.
func SameStatements(a, b []byte) bool {
	return withoutCommentLines(a) == withoutCommentLines(b)
}

// withoutCommentLines is script without its comment lines, directives
// excepted.
func withoutCommentLines(script []byte) string {
	var out strings.Builder
	for line := range strings.Lines(string(script)) {
		if text := strings.TrimSpace(line); !strings.HasPrefix(text, "--") || isDirective(text) {
			out.WriteString(line)
		}
	}
	return out.String()
}

// isDirective reports whether a comment line is an annotation that a
// migration tool obeys: goose's "-- +goose Up", "-- +goose
// StatementBegin" and the like, and dbmate's "-- migrate:up" and
// "-- migrate:down" (with their options). Both tools allow space after
// the dashes.
func isDirective(comment string) bool {
	text := strings.TrimSpace(strings.TrimPrefix(comment, "--"))
	return strings.HasPrefix(text, "+goose") || strings.HasPrefix(text, "migrate:")
}
