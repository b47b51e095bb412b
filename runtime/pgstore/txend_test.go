package pgstore

import (
	"strings"
	"testing"
)

func TestEndsTx(t *testing.T) {
	cases := map[string]bool{
		``:                                   false,
		`;;`:                                 false,
		`select 1`:                           false,
		`commit`:                             true,
		`COMMIT;`:                            true,
		`Commit and chain`:                   true,
		`end`:                                true,
		`END TRANSACTION`:                    true,
		`abort`:                              true,
		`rollback`:                           true,
		`ROLLBACK AND CHAIN`:                 true,
		`rollback prepared 'x'`:              true,
		`commit prepared 'x'`:                true,
		`prepare transaction 'x'`:            true,
		`PREPARE /* c */ Transaction 'x'`:    true,
		`prepare s as select 1`:              false,
		`begin`:                              true,
		`BEGIN ISOLATION LEVEL SERIALIZABLE`: true,
		`start transaction`:                  true,
		`rollback to savepoint s`:            true,
		`ROLLBACK TO s`:                      true,
		`rollback work to s`:                 true,
		`rollback transaction /* x */ to s`:  true,
		`rollback; to`:                       true,
		`savepoint s`:                        true,
		`SavePoint s;`:                       true,
		`select 1; savepoint s`:              true,
		`release savepoint s`:                true,
		`RELEASE s`:                          true,
		`select 1;release s`:                 true,
		`select 'savepoint s'`:               false,
		`select release, savepoint from t`:   false,
		`savepoints`:                         false,
		`released`:                           false,
		`select 1; commit`:                   true,
		`select 1;commit`:                    true,
		`/* ; */ commit`:                     true,
		`/* /* ; */ commit */ select 1`:      false,
		`/* /* */ commit */`:                 false,
		`/* unterminated commit`:             false,
		`select ';'; commit`:                 true,
		`select ';commit'`:                   false,
		`select 'it''s; commit'`:             false,
		`select 'a\'; commit`:                true,
		`select E'a\'; commit; select 1'`:    false,
		`select e'\\'; commit`:               true,
		`select 1e'\'; commit'`:              false,
		`select $x$;commit$x$`:               false,
		`select $x$;commit$y$; x$x$`:         false,
		`select $$;commit$$; commit`:         true,
		`select a$$; commit`:                 true,
		`select $1; commit`:                  true,
		`select 1$$; commit $$`:              false,
		`select $1$$; commit $$`:             false,
		"-- c\ncommit":                       true,
		"-- c; commit":                       false,
		"-- c\rcommit":                       true,
		"select 1 -- ; \n; commit":           true,
		`select 'end'`:                       false,
		`select "commit"`:                    false,
		`select 1 as "a;"; commit`:           true,
		`select 1 as "a"";commit"`:           false,
		`"commit"`:                           false,
		`commit_log`:                         false,
		`committed`:                          false,
		`ending`:                             false,
		`commit$`:                            false,
		`commitx; select 1`:                  false,
		"\tCOMMIT\n":                         true,
		`do $$begin commit; end$$`:           false,
		`call p()`:                           false,
		`select 'unterminated; commit`:       false,
		`select "unterminated; commit`:       false,
		`select $q$unterminated; commit`:     false,
	}
	for sql, want := range cases {
		if got := lexedEnding(sql); got != want {
			t.Errorf("lexedEnding(%q) = %v; want %v", sql, got, want)
		}
		if want && !endsTx(sql) {
			t.Errorf("endsTx(%q) = false; the lexer says true", sql)
		}
	}
}

// A text of several statements that names an ending keyword anywhere is
// refused, whatever the lexer reads: PostgreSQL continues an E” string
// across a newline, and reads a multi-byte client_encoding's characters
// whose last byte is a backslash, which no reading of the bytes follows.
// One statement, or a text whose ; only ends it, is read by the lexer.
func TestEndsTxSeveralStatementsNamingAKeyword(t *testing.T) {
	cases := map[string]bool{
		"SELECT E''\n'\\'', '\\'; COMMIT; --'": true,
		"SELECT E'\x95\\'; COMMIT; --'":        true,
		`select 'a\b'; select 'the end'`:       true,
		`select 1; select 'the end'`:           false,
		`select 'a\b'; select 'savepoint'`:     true,
		`select 'a\b'; select 'release'`:       true,
		`select 'it''s; commit'`:               false,
		`do $$begin perform 1; end$$`:          false,
		`select 'end';`:                        false,
		"select 'end';  \n\t;":                 false,
		`select case when a then 1 end;`:       false,
		`select 1; select 2`:                   false,
		`insert into t values ('x;y')`:         false,
		`select 1; select ending, commit_ts`:   false,
		`select $x$;commit$x$`:                 false,
	}
	for sql, want := range cases {
		if got := endsTx(sql); got != want {
			t.Errorf("endsTx(%q) = %v; want %v", sql, got, want)
		}
	}
}

// A plain string's backslash escapes the quote when
// standard_conforming_strings is off, which a handler may set: a text is
// refused if either reading ends the transaction.
func TestEndsTxEitherReadingOfABackslash(t *testing.T) {
	for _, sql := range []string{
		`select 'x\''; commit; select '`,  // standard_conforming_strings off
		`select 'x\'; commit; select '''`, // on
	} {
		if !endsTx(sql) {
			t.Errorf("endsTx(%q) = false; want true", sql)
		}
	}
}

func FuzzEndsTx(f *testing.F) {
	for _, s := range []string{
		`select 1; commit`, `/* ; */ commit`, `select ';'; commit`, `select $x$;commit$x$`,
		"-- c\ncommit", `Commit and chain`, `rollback to savepoint s`, `select 'end'`,
		`select "commit"`, `select E'\'; end'`, `/* /* */ */ abort`, `prepare transaction 'x'`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		got := lexedEnding(sql)
		want := refEndsTx(sql, false) || refEndsTx(sql, true)
		if got != want {
			t.Fatalf("lexedEnding(%q) = %v; the reference says %v", sql, got, want)
		}
		if want && !endsTx(sql) {
			t.Fatalf("endsTx(%q) = false; the reference says true", sql)
		}
	})
}

// refEndsTx is a reference for endsTxLexed, written apart from it: a
// state machine over the bytes of sql that collects each top-level
// statement's text with strings, identifiers and comments blanked out,
// then reads the first words of each.
func refEndsTx(sql string, backslashEscapes bool) bool {
	const (
		code = iota
		lineComment
		blockComment
		str
		escStr
		ident
		dollar
	)
	isIdent := func(c byte) bool {
		return c == '_' || c == '$' || c >= 0x80 || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	var stmts []string
	var cur strings.Builder
	state, depth, tag := code, 0, ""
	prevWord := false // the last byte in code continued a word that did not start with a digit
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		next := byte(0)
		if i+1 < len(sql) {
			next = sql[i+1]
		}
		switch state {
		case code:
			switch {
			case c == ';':
				stmts = append(stmts, cur.String())
				cur.Reset()
				prevWord = false
				continue
			case c == '-' && next == '-':
				state = lineComment
			case c == '/' && next == '*':
				state, depth = blockComment, 1
				i++
			case c == '\'':
				if backslashEscapes {
					state = escStr
				} else {
					state = str
				}
			case (c == 'e' || c == 'E') && next == '\'' && !prevWord:
				state = escStr
				i++
			case c == '"':
				state = ident
			case c == '$' && !prevWord:
				j := i + 1
				for j < len(sql) && (isIdent(sql[j]) && sql[j] != '$') && !(j == i+1 && '0' <= sql[j] && sql[j] <= '9') {
					j++
				}
				if j < len(sql) && sql[j] == '$' {
					state, tag = dollar, sql[i:j+1]
					i = j
				} else {
					cur.WriteByte(c)
				}
			default:
				if isIdent(c) {
					if !prevWord && '0' <= c && c <= '9' {
						cur.WriteByte(c)
						continue
					}
					prevWord = true
				} else {
					prevWord = false
				}
				cur.WriteByte(c)
				continue
			}
			cur.WriteByte(' ')
			prevWord = false
		case lineComment:
			if c == '\n' || c == '\r' {
				state = code
				cur.WriteByte(' ')
			}
		case blockComment:
			switch {
			case c == '/' && next == '*':
				depth++
				i++
			case c == '*' && next == '/':
				depth--
				i++
				if depth == 0 {
					state = code
					cur.WriteByte(' ')
				}
			}
		case str, escStr:
			switch {
			case c == '\\' && state == escStr:
				i++
			case c == '\'' && next == '\'':
				i++
			case c == '\'':
				state = code
				cur.WriteByte('\'') // ends whatever word came before
			}
		case ident:
			switch {
			case c == '"' && next == '"':
				i++
			case c == '"':
				state = code
				cur.WriteByte('"')
			}
		case dollar:
			if strings.HasPrefix(sql[i:], tag) {
				i += len(tag) - 1
				state = code
				cur.WriteByte(' ')
			}
		}
	}
	stmts = append(stmts, cur.String())
	for _, s := range stmts {
		words := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v' })
		if len(words) == 0 {
			continue
		}
		first := func(w string) string { // the word part of a field
			n := 0
			for n < len(w) && isIdent(w[n]) {
				n++
			}
			return strings.ToLower(w[:n])
		}
		w := make([]string, 0, 3)
		for k := 0; k < len(words) && k < 3; k++ {
			w = append(w, first(words[k]))
			if len(first(words[k])) != len(words[k]) {
				break
			}
		}
		at := func(k int) string {
			if k < len(w) {
				return w[k]
			}
			return ""
		}
		switch at(0) {
		case "commit", "end", "abort", "begin", "rollback", "savepoint", "release":
			return true
		case "start", "prepare":
			if at(1) == "transaction" {
				return true
			}
		}
	}
	return false
}

// A typical handler's INSERT, about 100 bytes.
const benchInsert = `INSERT INTO orders (tenant, customer_id, amount_cents, currency, note) VALUES ($1, $2, $3, $4, $5)`

func BenchmarkEndsTx(b *testing.B) {
	for name, sql := range map[string]string{
		"one statement":            benchInsert,
		"one statement, with a ;":  benchInsert + ";",
		"two statements, a string": `UPDATE orders SET note = 'paid; thanks' WHERE id = $1; SELECT count(*) FROM orders`,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(sql)))
			for b.Loop() {
				if endsTx(sql) {
					b.Fatal("refused")
				}
			}
		})
	}
}

func TestEndsTxAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { endsTx(benchInsert + `; select 'a\b' /* c */`) }); n != 0 {
		t.Errorf("endsTx allocates %v times a call; want 0", n)
	}
}
