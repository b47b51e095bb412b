package load

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// suggest returns the candidate closest to s when it is close enough to be
// a plausible typo, or "". Case, '-' and '_' are ignored first, so that
// max_snapshot_bytes finds maxSnapshotBytes.
func suggest(s string, candidates []string) string {
	norm := func(x string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(x))
	}
	ns := norm(s)
	best, bestDist := "", -1
	for _, c := range candidates {
		d := editDistance(ns, norm(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := max(1, min(3, len(ns)/3))
	if bestDist < 0 || bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, counted in
// bytes (the names compared are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// deriveID names an operation that has no operationId from its method and
// path: POST /v1/customers/{customer}/sources is
// post_v1_customers_customer_sources. It depends on nothing but the method
// and the template, so it stays the same from one run to the next.
func deriveID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	sep := true
	for _, r := range norm.NFC.String(path) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if sep {
				b.WriteByte('_')
				sep = false
			}
			b.WriteRune(r)
			continue
		}
		sep = true
	}
	return b.String()
}

// goName turns an operation ID into an exported Go identifier: the ID is
// split at every character that cannot appear in one, and each part starts
// with a capital ("createTransfer" → "CreateTransfer",
// "post_v1_customers" → "PostV1Customers", "get-pet.by-id" → "GetPetById",
// "créerPaiement" → "CréerPaiement"). Letters and digits of every script
// are kept, as Go allows, after composing accents with their letters (NFC:
// a combining mark cannot stand in a Go name). A name whose first
// character has no capital (a digit, 支) gets an "Op" prefix, since only
// an upper-case letter exports it.
func goName(id string) string {
	var b strings.Builder
	upper := true
	for _, r := range norm.NFC.String(id) {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			upper = true
			continue
		}
		if upper {
			r = unicode.ToUpper(r)
			upper = false
		}
		b.WriteRune(r)
	}
	s := b.String()
	if first, _ := utf8.DecodeRuneInString(s); !unicode.IsUpper(first) {
		s = "Op" + s
	}
	return s
}

// misspeltExtension reports whether an extension's name is a near miss of
// x-idempotency: another case (X-Idempotency) or one or two letters off
// (x-idempotent, x-idempotancy), with - and _ ignored. x-idempotency-key
// and other longer names are extensions of their own.
func misspeltExtension(name string) bool {
	if name == extension || len(name) < 2 || !strings.EqualFold(name[:2], "x-") {
		return false
	}
	n := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	return editDistance(n(name), n(extension)) <= 2
}
