package database

import "regexp"

// The parts of a database URL or key=value DSN that may carry a secret:
// the password of user:password@ (matched up to the last @ of the line, so
// that an unescaped @ or space in the password does not leave its tail
// behind; a later @ on the line is redacted with it, which only hides more),
// and the value of a password parameter, quoted or not.
var (
	userinfoPassword = regexp.MustCompile(`(://[^:/@\s]*):.*@`)
	passwordParam    = regexp.MustCompile(`(?i)\b((?:ssl)?pass(?:word|wd)?|pwd)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&\s]*)`)
)

// Redact returns rawURL with every password replaced by xxxxx, for error
// messages and logs. It works on text rather than on a parsed URL, so that
// a string no parser accepts (the very one an error is about) is redacted
// too.
func Redact(rawURL string) string {
	s := userinfoPassword.ReplaceAllString(rawURL, "$1:xxxxx@")
	return passwordParam.ReplaceAllString(s, "${1}${2}xxxxx")
}
