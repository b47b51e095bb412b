// Package sqlqualified finds what a PostgreSQL statement names by the
// search_path: the functions it calls by an unqualified name
// (Unqualified), and its operators, casts, collations and catalog
// relations (Operators). A statement that runs outside the checked end of a
// handler's transaction (a runner's, an operator's, a sweeper's) is
// parsed under a search_path on which a handler's role may have made a
// function or an operator of the same name that fits the arguments
// better than pg_catalog's, and one that runs in a handler's
// transaction under a search_path the handler set, which may name
// pg_catalog after a schema of the handler's; named pg_catalog.f or
// OPERATOR(pg_catalog.op), only pg_catalog's is chosen. The stores'
// tests run it over every statement they send.
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
// lists columns. A quoted name ("lower") is returned with its quotes;
// strings and comments are skipped.
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

// token is a name (word, with its schema if qualified; a quoted part
// keeps its quotes, but a quoted "pg_catalog" schema is written
// pg_catalog), an opening parenthesis (paren; afterInto when the name
// before it follows INTO or AS), a run of operator characters (op; digit
// when a digit follows it at once), a string constant, quoted or
// dollar-quoted (str; attached when it follows a name's last character
// at once, as E'...' does), another character of the grammar (punct: a
// closing parenthesis, a comma, a semicolon), or anything else.
type token struct {
	word      string
	paren     bool
	afterInto bool
	op        string
	digit     bool
	str       bool
	attached  bool
	punct     rune
}

// tokens yields sql's tokens, leaving out comments; a string constant
// is yielded as such, without its text.
func tokens(sql string) func(func(token) bool) {
	return func(yield func(token) bool) {
		r := []rune(sql)
		var last, beforeLast string
		for i := 0; i < len(r); {
			c := r[i]
			var tok token
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
			case c == '\'':
				tok = token{str: true, attached: i > 0 && nameChar(r[i-1])}
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
					tok = token{str: true}
					i = j + 1 + len([]rune(string(r[j+1:])[:end])) + len([]rune(tag))
				} else {
					i = j
				}
			case unicode.IsLetter(c) || c == '_' || c == '"':
				j := scanName(r, i)
				w := string(r[i:j])
				if rest, ok := strings.CutPrefix(w, `"pg_catalog".`); ok {
					w = "pg_catalog." + rest
				}
				i = j
				beforeLast, last = last, strings.ToLower(w)
				if !yield(token{word: w}) {
					return
				}
				continue
			case c == '(':
				i++
				tok = token{paren: true, afterInto: beforeLast == "into" || beforeLast == "as"}
			case strings.ContainsRune(operatorChars, c):
				j := i
				for j < len(r) && strings.ContainsRune(operatorChars, r[j]) &&
					!(r[j] == '-' && j+1 < len(r) && r[j+1] == '-') && !(r[j] == '/' && j+1 < len(r) && r[j+1] == '*') {
					j++
				}
				tok = token{op: string(r[i:j]), digit: j < len(r) && unicode.IsDigit(r[j])}
				i = j
			case c == ')' || c == ',' || c == ';' || c == ':':
				i++
				tok = token{punct: c}
			default:
				i++
			}
			beforeLast, last = last, ""
			if !yield(tok) {
				return
			}
		}
	}
}

// scanName returns the index just past the name that starts at i: its
// parts, each a word or a quoted identifier, joined by dots, and a dot
// after the last (t.* or OPERATOR(pg_catalog.=)).
func scanName(r []rune, i int) int {
	for {
		if r[i] == '"' {
			i = skipQuoted(r, i, '"')
		} else {
			for i < len(r) && (nameChar(r[i])) {
				i++
			}
		}
		if i >= len(r) || r[i] != '.' {
			return i
		}
		if i++; i >= len(r) || !(unicode.IsLetter(r[i]) || r[i] == '_' || r[i] == '"') {
			return i
		}
	}
}

// nameChar reports whether c continues a word.
func nameChar(c rune) bool {
	return unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_' || c == '$'
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

// operatorChars are the characters of which PostgreSQL makes an
// operator's name.
const operatorChars = "+-*/<>=~!@#%^&|`?"

// keywordOperators are the words of the grammar that stand for an
// operator the search_path finds: x IN (...) and x BETWEEN a AND b are
// = ANY and >= and <=, LIKE and ILIKE are ~~ and ~~*, SIMILAR TO is ~,
// IS DISTINCT FROM and NULLIF are =. None of them can name pg_catalog's,
// so a statement writes the operator instead: OPERATOR(pg_catalog.=)
// ANY (...).
var keywordOperators = map[string]bool{
	"in": true, "between": true, "like": true, "ilike": true, "similar": true,
	"distinct": true, "nullif": true, "overlaps": true,
}

// keywordTypes are the names of types that are words of the grammar,
// which name pg_catalog's type whatever the search_path: a cast to any
// other name (::text, ::oid) finds the type by the search_path.
var keywordTypes = map[string]bool{
	"bigint": true, "bit": true, "boolean": true, "char": true, "character": true, "dec": true,
	"decimal": true, "double": true, "float": true, "int": true, "integer": true, "interval": true,
	"nchar": true, "numeric": true, "real": true, "smallint": true, "time": true, "timestamp": true,
	"varchar": true,
}

// KeywordType reports whether name, in lower case, is a type's name that
// is a word of the grammar and names pg_catalog's type whatever the
// search_path (bigint, integer, interval...).
func KeywordType(name string) bool { return keywordTypes[name] }

// constantWords are the words of the grammar, beyond syntax's and
// keywordOperators', that a string constant may follow without being a
// typed literal (oid '5', whose type the search_path finds): those of
// LIKE's ESCAPE, SIMILAR TO, AT TIME ZONE, the last words of the
// grammar's types of two (double precision, character varying), DO's
// body, and the PL/pgSQL statements of a function's body that take an
// expression.
var constantWords = map[string]bool{
	"escape": true, "to": true, "zone": true, "precision": true, "varying": true, "do": true,
	"default": true, "return": true, "perform": true, "execute": true, "raise": true,
	"exception": true, "warning": true, "notice": true, "info": true, "log": true, "debug": true,
}

// literalPrefixes are the letters that, written at once before a string
// constant, make it an escape, bit, hexadecimal or national one, not a
// typed literal.
var literalPrefixes = map[string]bool{"e": true, "b": true, "x": true, "n": true}

// Operators returns the operators in sql, in order, that the search_path
// finds: those not written OPERATOR(pg_catalog.op), and the words of the
// grammar that stand for one (keywordOperators; DISTINCT only after IS
// or IS NOT), a simple CASE (CASE x WHEN y, which compares with =) as
// CASE, a join's USING (columns) as USING, and a NATURAL join, which
// compares its common columns with =, as NATURAL. An operator of a schema the handler's
// role may create in, put before pg_catalog on the search_path (SET
// LOCAL search_path = s, pg_catalog, or a deployment's), with operands
// of exactly the types of pg_catalog's, is chosen there in its place; so
// is one that fits the operands better wherever it stands. What is not
// an operator is left out: the = of a SET clause's assignment, the * of
// count(*), SELECT * and t.*, and a minus sign before a number, which
// the grammar makes part of the constant. A cast to a type by a name
// the search_path finds (::text, ::"text", CAST(x AS text), or a typed
// literal, text 'x'; not ::pg_catalog.text nor ::bigint, a word of the
// grammar) is returned as ::text, and a collation so found (COLLATE
// "C", not COLLATE pg_catalog."C") as COLLATE "C". Names that start with
// pg_ and are not qualified, a catalog's relations (pg_locks) that a
// temporary or another schema's relation of the name could stand for,
// are returned too. Strings and comments are skipped.
func Operators(sql string) []string {
	var (
		found []string
		prev  token // the token before this one
		prev2 token // and the one before that
		depth int
		set   = -1  // the depth of the SET clause the tokens are in, or -1
		casts []int // the depths of the CAST( the tokens are in
		as    bool  // the token follows a CAST's AS
	)
	for t := range tokens(sql) {
		w := strings.ToLower(t.word)
		pw, p2 := strings.ToLower(prev.word), strings.ToLower(prev2.word)
		castType := as
		as = false
		switch {
		case t.paren:
			depth++
			if pw == "cast" {
				casts = append(casts, depth)
			}
		case t.punct == ')':
			depth--
			if depth < set {
				set = -1
			}
			for len(casts) > 0 && depth < casts[len(casts)-1] {
				casts = casts[:len(casts)-1]
			}
		case w == "as" && len(casts) > 0 && depth == casts[len(casts)-1]:
			as = true
		case t.punct == ';':
			set = -1
		case w == "set":
			set = depth
		case set == depth && (w == "where" || w == "from" || w == "returning"):
			set = -1
		}
		switch {
		case t.op != "":
			switch {
			case strings.HasSuffix(pw, ".") && prev2.paren:
				// OPERATOR(schema.op)
				if pw != "pg_catalog." {
					found = append(found, prev.word+t.op)
				}
			case t.op == "*" && (strings.HasSuffix(pw, ".") || prev.paren || prev.punct == ',' || pw == "select" || pw == "returning" || pw == "unlisten"):
			case t.op == "=" && set == depth && prev.word != "" && (p2 == "set" || prev2.punct == ','):
			case t.op == "-" && t.digit && (prev.op != "" || prev.paren || (prev.punct != 0 && prev.punct != ')') || syntax[pw] || keywordOperators[pw]):
			case t.op == "=>":
				// A named argument (f(name => value)): no operator is named =>.
			default:
				found = append(found, t.op)
			}
		case w == "distinct" && (pw == "is" || pw == "not" && p2 == "is"), keywordOperators[w] && w != "distinct":
			found = append(found, t.word)
		case w == "natural":
			found = append(found, "NATURAL")
		case prev.paren && strings.ToLower(prev2.word) == "using" && w != "select" && w != "values" && w != "with":
			// A join's USING (columns), not DELETE's USING (subquery).
			found = append(found, "USING")
		case pw == "case" && w != "when":
			found = append(found, "CASE")
		case w != "" && (castType || prev.punct == ':' && prev2.punct == ':') && !qualified(w) && !keywordTypes[w]:
			found = append(found, "::"+t.word)
		case w != "" && pw == "collate" && !qualified(w):
			found = append(found, "COLLATE "+t.word)
		case t.str && pw != "" && !qualified(pw) && !keywordTypes[pw] && !syntax[pw] && !keywordOperators[pw] &&
			!constantWords[pw] && !(t.attached && literalPrefixes[pw]):
			// A typed literal: its type, the name before it.
			found = append(found, "::"+prev.word)
		}
		if p := strings.ToLower(prev.word); strings.HasPrefix(p, "pg_") && !strings.HasPrefix(p, "pg_catalog.") && !t.paren {
			// A relation, not a function's call (Unqualified).
			found = append(found, prev.word)
		}
		prev2, prev = prev, t
	}
	if p := strings.ToLower(prev.word); strings.HasPrefix(p, "pg_") && !strings.HasPrefix(p, "pg_catalog.") {
		found = append(found, prev.word)
	}
	return found
}
