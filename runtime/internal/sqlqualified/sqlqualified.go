// Package sqlqualified finds the functions a PostgreSQL statement calls
// by an unqualified name. A statement that runs outside the checked end of
// a handler's transaction (a runner's, an operator's, a sweeper's) is
// parsed under a search_path on which a handler's role may have made a
// function of the same name that fits the arguments better than
// pg_catalog's; named pg_catalog.f, only pg_catalog's is chosen. The
// stores' tests run it over every such statement.
package sqlqualified

import (
	"strings"
	"unicode"
)

// syntax are the words that a parenthesis may follow in a statement
// without being a call of a function named by the search_path: keywords
// of the grammar (CAST, COALESCE, EXISTS, IN, ANY, FILTER...), the
// grammar's own forms that name pg_catalog's function themselves
// (EXTRACT), and the clauses before a parenthesized list or subquery.
var syntax = map[string]bool{
	"all": true, "and": true, "any": true, "array": true, "as": true, "between": true,
	"by": true, "case": true, "cast": true, "coalesce": true, "conflict": true,
	"else": true, "exists": true, "extract": true, "filter": true, "from": true,
	"greatest": true, "in": true, "is": true, "join": true, "lateral": true, "least": true,
	"limit": true, "not": true, "nullif": true, "offset": true, "on": true,
	"operator": true, "or": true, "over": true, "returning": true, "row": true,
	"select": true, "set": true, "some": true, "then": true, "using": true,
	"values": true, "when": true, "where": true, "with": true,
}

// Unqualified returns the names in sql, in order, that are followed by a
// parenthesis as a function's call is, not qualified by pg_catalog, and
// neither syntax, nor among allowed (the store's own functions, whose
// names the end of a handler's transaction refuses in every schema), nor
// a relation named after INTO or an alias after AS, whose parenthesis
// lists columns. Strings, quoted identifiers and comments are skipped.
func Unqualified(sql string, allowed ...string) []string {
	allow := make(map[string]bool, len(allowed))
	for _, a := range allowed {
		allow[strings.ToLower(a)] = true
	}
	var found []string
	prev := ""
	for t := range tokens(sql) {
		if t.word != "" {
			prev, t.word = t.word, ""
			continue
		}
		if t.paren && prev != "" {
			name := strings.ToLower(prev)
			if !qualified(name) && !syntax[name] && !allow[name] && !t.afterInto {
				found = append(found, prev)
			}
		}
		prev = ""
	}
	return found
}

// qualified reports whether name is pg_catalog's, by a name that no
// search_path changes.
func qualified(name string) bool { return strings.HasPrefix(name, "pg_catalog.") }

// token is a name (word, with its schema if qualified), an opening
// parenthesis (paren; afterInto when the name before it follows INTO or
// AS), or anything else.
type token struct {
	word      string
	paren     bool
	afterInto bool
}

// tokens yields sql's tokens, leaving out strings, quoted identifiers,
// dollar-quoted bodies and comments.
func tokens(sql string) func(func(token) bool) {
	return func(yield func(token) bool) {
		r := []rune(sql)
		var last, beforeLast string
		for i := 0; i < len(r); {
			c := r[i]
			switch {
			case unicode.IsSpace(c):
				i++
				continue
			case c == '-' && i+1 < len(r) && r[i+1] == '-':
				for i < len(r) && r[i] != '\n' {
					i++
				}
				continue
			case c == '/' && i+1 < len(r) && r[i+1] == '*':
				end := strings.Index(string(r[i+2:]), "*/")
				if end < 0 {
					return
				}
				i += 2 + len([]rune(string(r[i+2:])[:end])) + 2
				continue
			case c == '\'' || c == '"':
				i = skipQuoted(r, i, c)
			case c == '$' && i+1 < len(r) && (r[i+1] == '$' || unicode.IsLetter(r[i+1]) || r[i+1] == '_'):
				j := i + 1
				for j < len(r) && r[j] != '$' && (unicode.IsLetter(r[j]) || unicode.IsDigit(r[j]) || r[j] == '_') {
					j++
				}
				if j < len(r) && r[j] == '$' {
					tag := string(r[i : j+1])
					end := strings.Index(string(r[j+1:]), tag)
					if end < 0 {
						return
					}
					i = j + 1 + len([]rune(string(r[j+1:])[:end])) + len([]rune(tag))
				} else {
					i = j
				}
			case unicode.IsLetter(c) || c == '_':
				j := i
				for j < len(r) && (unicode.IsLetter(r[j]) || unicode.IsDigit(r[j]) || r[j] == '_' || r[j] == '$' || r[j] == '.') {
					j++
				}
				w := string(r[i:j])
				i = j
				beforeLast, last = last, strings.ToLower(w)
				if !yield(token{word: w}) {
					return
				}
				continue
			case c == '(':
				i++
				if !yield(token{paren: true, afterInto: beforeLast == "into" || beforeLast == "as"}) {
					return
				}
			default:
				i++
			}
			beforeLast, last = last, ""
			if !yield(token{}) {
				return
			}
		}
	}
}

// skipQuoted returns the index just past the string or quoted identifier
// that starts at i with quote q; a doubled quote stands for itself, and
// an escape string's (E'...') backslash escapes the next character.
func skipQuoted(r []rune, i int, q rune) int {
	escapes := q == '\'' && i > 0 && (r[i-1] == 'E' || r[i-1] == 'e')
	for i++; i < len(r); i++ {
		switch {
		case escapes && r[i] == '\\':
			i++
		case r[i] == q && i+1 < len(r) && r[i+1] == q:
			i++
		case r[i] == q:
			return i + 1
		}
	}
	return i
}
