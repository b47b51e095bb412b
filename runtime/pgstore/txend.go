package pgstore

import "strings"

// A handler's statement that ends the transaction it runs in (COMMIT,
// ROLLBACK, END, ABORT, PREPARE TRANSACTION, each with AND CHAIN or not)
// would commit, before the end of the request could look at it, whatever
// the handler wrote: another tenant's key deleted, say, and that request
// then runs again (docs/semantics.md §5.4, §7.2). So every text a handler
// hands pgstore's transaction is read before it is sent, split into its
// top-level statements as PostgreSQL's lexer splits them, and refused if
// any of them ends a transaction block or begins one (BEGIN and START
// TRANSACTION do nothing inside one but warn; a handler has no use for
// them), or begins or ends a savepoint (SAVEPOINT, RELEASE [SAVEPOINT],
// ROLLBACK TO [SAVEPOINT]). A savepoint a handler left open would have
// the statements that end the transaction run inside it, and COMMIT,
// which commits the savepoint first, would give the transaction back the
// read-write state those statements took from it before the work
// PostgreSQL runs at COMMIT (a deferred trigger, a cursor's query); a
// handler's savepoints are the nested transactions of its pgx.Tx, which
// pgstore sends and keeps count of (savepoint.go). PL/pgSQL and SQL
// functions cannot run SAVEPOINT, so a text is the only way to one.
// Statements inside a function or a DO block are not read: PostgreSQL
// refuses a COMMIT or ROLLBACK there while a transaction block is open
// ("invalid transaction termination"), and a handler's statements always
// run in one.
//
// Where a text's reading depends on the session (a backslash in a plain
// string escapes the quote when standard_conforming_strings is off, and
// a handler can set it), the text is read both ways and refused if either
// reading finds a statement that ends the transaction. And since neither
// reading follows every rule of the server's (an E'' string continued on
// the next line, a client_encoding whose characters end in a backslash
// byte), a text of several statements with a backslash in it that names
// one of these keywords anywhere, in a string or a comment too, is
// refused whatever the reading: such statements are sent one by one.

// endsTx reports whether any top-level statement of sql ends or begins a
// transaction block or a savepoint. It reads sql once (twice when it has a backslash),
// or only its first words when it has no ;, and allocates nothing.
func endsTx(sql string) bool {
	if strings.IndexByte(sql, ';') < 0 {
		// One statement, the common case: only its first words are read.
		i := skipBlank(sql, 0)
		return i < len(sql) && endingStatement(sql, i)
	}
	if severalStatements(sql) && strings.IndexByte(sql, '\\') >= 0 && namesEnding(sql) {
		// A text the server may split into several statements, with a
		// backslash in it, is refused when it names an ending keyword
		// anywhere, in a string or a comment too: where a string ends
		// then depends on the session (standard_conforming_strings, an
		// E'' string continued on the next line, a multi-byte
		// client_encoding whose characters can end in the backslash's
		// byte), and no reading of the bytes here follows every one of
		// them. Without a backslash every reading splits alike.
		return true
	}
	return lexedEnding(sql)
}

// lexedEnding reports whether a statement of sql, split as the server
// splits it, ends or begins a transaction block; a text with a backslash
// is read both with and without backslash escapes in plain strings.
func lexedEnding(sql string) bool {
	if endsTxLexed(sql, false) {
		return true
	}
	return strings.IndexByte(sql, '\\') >= 0 && endsTxLexed(sql, true)
}

// severalStatements reports whether sql has a ; with anything but white
// space after it: only then can the server read more than one statement
// in it.
func severalStatements(sql string) bool {
	i := strings.IndexByte(sql, ';')
	return i >= 0 && strings.TrimRight(sql[i+1:], " \t\n\r\f\v;") != ""
}

// namesEnding reports whether any word of sql, read as bytes wherever it
// stands, is a keyword that begins a statement ending or beginning a
// transaction block. A byte of a multi-byte character continues a word,
// as the server reads it, so a keyword the server sees is a word here in
// any client_encoding.
func namesEnding(sql string) bool {
	for i := 0; i < len(sql); {
		if !identByte(sql[i]) {
			i++
			continue
		}
		j := i
		for j < len(sql) && identByte(sql[j]) {
			j++
		}
		switch w := sql[i:j]; {
		case keyword(w, "commit"), keyword(w, "end"), keyword(w, "abort"), keyword(w, "begin"),
			keyword(w, "start"), keyword(w, "prepare"), keyword(w, "rollback"),
			keyword(w, "savepoint"), keyword(w, "release"):
			return true
		}
		i = j
	}
	return false
}

// endsTxLexed is endsTx with plain strings read as standard_conforming_strings
// off (backslashEscapes) or on reads them.
func endsTxLexed(sql string, backslashEscapes bool) bool {
	i := 0
	for {
		i = skipBlank(sql, i)
		switch {
		case i >= len(sql):
			return false
		case sql[i] == ';':
			i++
			continue
		case endingStatement(sql, i):
			return true
		}
		i = statementEnd(sql, i, backslashEscapes)
	}
}

// endingStatement reports whether the statement that starts at sql[i]
// ends or begins a transaction block or a savepoint (ROLLBACK, with TO or
// without, and RELEASE begin no other statement).
func endingStatement(sql string, i int) bool {
	w, j := word(sql, i)
	switch {
	case keyword(w, "commit"), keyword(w, "end"), keyword(w, "abort"), keyword(w, "begin"),
		keyword(w, "rollback"), keyword(w, "savepoint"), keyword(w, "release"):
		return true
	case keyword(w, "start"), keyword(w, "prepare"):
		w, _ = word(sql, skipBlank(sql, j))
		return keyword(w, "transaction")
	}
	return false
}

// keyword reports whether w is kw (in lower case), in any case.
func keyword(w, kw string) bool { return len(w) == len(kw) && strings.EqualFold(w, kw) }

// identByte reports whether c continues an identifier (or a keyword).
func identByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

// word returns the identifier or keyword at sql[i] (empty if none) and
// the index after it.
func word(sql string, i int) (string, int) {
	j := i
	for j < len(sql) && identByte(sql[j]) {
		j++
	}
	return sql[i:j], j
}

// skipBlank returns the index of the first byte at or after i that is
// neither white space nor in a comment (-- to the end of the line, or
// /* */, nested).
func skipBlank(sql string, i int) int {
	for i < len(sql) {
		switch c := sql[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' && sql[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = blockCommentEnd(sql, i)
		default:
			return i
		}
	}
	return i
}

// blockCommentEnd returns the index after the /* */ comment, nested, that
// starts at sql[i], or len(sql) when it does not end.
func blockCommentEnd(sql string, i int) int {
	depth := 0
	for i < len(sql) {
		switch {
		case sql[i] == '/' && i+1 < len(sql) && sql[i+1] == '*':
			depth++
			i += 2
		case sql[i] == '*' && i+1 < len(sql) && sql[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return i
}

// statementEnd returns the index of the ; that ends the statement that
// starts at sql[i], or len(sql): a ; in a string, a quoted identifier, a
// dollar-quoted string or a comment ends nothing.
func statementEnd(sql string, i int, backslashEscapes bool) int {
	for i < len(sql) {
		// Every token is read whole, so sql[i] starts one.
		switch c := sql[i]; {
		case c == ';':
			return i
		case c == '\'':
			i = quotedEnd(sql, i+1, '\'', backslashEscapes)
		case (c == 'e' || c == 'E') && i+1 < len(sql) && sql[i+1] == '\'':
			i = quotedEnd(sql, i+2, '\'', true)
		case c == '"':
			i = quotedEnd(sql, i+1, '"', false)
		case c == '$':
			i = dollarEnd(sql, i)
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-', c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = skipBlank(sql, i)
		case c >= '0' && c <= '9':
			// A number: a letter after it starts a word (1e'x' is 1
			// and an escaped string), a $ a dollar quote.
			i++
		case identByte(c):
			// A word: an E or a $ inside it starts nothing.
			_, i = word(sql, i)
		default:
			i++
		}
	}
	return i
}

// quotedEnd returns the index after the quote q that closes the string or
// identifier whose text starts at sql[i]; a doubled quote, or with
// backslashEscapes a backslash, escapes the next byte.
func quotedEnd(sql string, i int, q byte, backslashEscapes bool) int {
	for i < len(sql) {
		switch sql[i] {
		case '\\':
			if backslashEscapes {
				i++
			}
		case q:
			if i+1 < len(sql) && sql[i+1] == q {
				i++
			} else {
				return i + 1
			}
		}
		i++
	}
	return len(sql)
}

// dollarEnd returns the index after the dollar-quoted string ($$...$$ or
// $tag$...$tag$) that starts at sql[i], or i+1 when the $ at sql[i] starts
// none (a parameter, $1).
func dollarEnd(sql string, i int) int {
	j := i + 1
	for j < len(sql) && identByte(sql[j]) && sql[j] != '$' && (j > i+1 || sql[j] < '0' || sql[j] > '9') {
		j++
	}
	if j >= len(sql) || sql[j] != '$' {
		return i + 1
	}
	delim := sql[i : j+1]
	if k := strings.Index(sql[j+1:], delim); k >= 0 {
		return j + 1 + k + len(delim)
	}
	return len(sql)
}
