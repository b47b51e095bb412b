package load

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/idemgen/idemgen/internal/work"
)

// suggest returns the candidate closest to s when it is close enough to be
// a plausible typo, or "". Case, '-' and '_' are ignored first, so that
// max_snapshot_bytes finds maxSnapshotBytes.
func suggest(s string, candidates []string) string {
	norm := func(x string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(x))
	}
	ns := norm(s)
	limit := max(1, min(3, len(ns)/3))
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if d := editDistance(ns, norm(c), limit); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, counted in
// bytes (the names compared are ASCII), when it is at most limit, and
// limit+1 when it is more. Only the distances a typo may have are ever
// accepted, so only the 2·limit+1 diagonals around the main one are worked
// out, and the work stops at the first row whose distances all pass
// limit: it grows with the names' length, not with the product of their
// lengths, which a spec's long property names would make quadratic.
func editDistance(a, b string, limit int) int {
	if len(a) > len(b) {
		a, b = b, a
	}
	if len(b)-len(a) > limit {
		return limit + 1
	}
	// prev[j] and cur[j] are the distances of prefixes of a to b[:j];
	// cells outside the band hold limit+1, which stands for "more".
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = min(j, limit+1)
	}
	for i := 1; i <= len(a); i++ {
		lo, hi := max(1, i-limit), min(len(b), i+limit)
		work.Add(hi - lo + 1)
		cur[lo-1] = limit + 1
		if lo == 1 {
			cur[0] = min(i, limit+1)
		}
		rowMin := cur[lo-1]
		for j := lo; j <= hi; j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			up := limit + 1
			if j <= i-1+limit {
				up = prev[j]
			}
			cur[j] = min(up+1, cur[j-1]+1, prev[j-1]+cost, limit+1)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin > limit {
			return limit + 1
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
