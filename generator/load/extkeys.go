package load

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	yaml "go.yaml.in/yaml/v4"
	"golang.org/x/text/unicode/norm"
)

// An x-idempotency that idemgen does not read is an operation that ships
// unprotected while its author, and its reviewer, read a policy on it.
// The loader reads the extension on an operation only; these checks find
// it, or a key that reads as it, everywhere else a path item holds.

// lookalike is how an extension key resembles x-idempotency.
type lookalike int

const (
	notLookalike lookalike = iota
	// nearMiss: one or two letters off (x-idempotent, x-idempotancy), -
	// and _ ignored, in any case.
	nearMiss
	// confusable: x-idempotency spelt with letters of another script
	// that look like its own (Cyrillic х, е, о, р, с, у, і; Greek ο, ρ, ι,
	// υ, χ), with invisible format characters, or in fullwidth letters,
	// or an x- key that is x-idempotency but for characters that are not
	// ASCII (Latin's dotless ı, Armenian's օ and ո, an accented letter),
	// whichever script they come from. It reads as the extension in an
	// editor and a diff, and is not.
	confusable
	// otherCase: x-idempotency in another case (X-Idempotency). Extension
	// names are case-sensitive; it is the likeliest slip, and its
	// operation would ship unprotected.
	otherCase
)

// extensionLookalike says how name resembles x-idempotency. Longer
// names (x-idempotency-key) are extensions of their own.
func extensionLookalike(name string) lookalike {
	if name == extension {
		return notLookalike
	}
	if strings.EqualFold(name, extension) {
		return otherCase
	}
	folded := skeleton(name)
	if folded != name && strings.EqualFold(folded, extension) || readsAsExtension(folded) {
		return confusable
	}
	if len(folded) < 2 || !strings.EqualFold(folded[:2], "x-") {
		return notLookalike
	}
	// One character that is not ASCII counts as one letter off.
	n := func(s string) string {
		s = strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
		return strings.Map(func(r rune) rune { return min(r, unicode.MaxASCII) }, s)
	}
	if editDistance(n(folded), n(extension), 2) <= 2 {
		return nearMiss
	}
	return notLookalike
}

// skeleton is name as it looks: compatibility forms folded (fullwidth
// letters, ligatures), format characters (zero-width spaces and joiners,
// bidi controls) dropped, and the letters of other scripts that look
// like Latin ones, and the dashes that look like a hyphen, replaced by
// them. The table holds the look-alikes of Unicode's confusables list
// that occur in Cyrillic and Greek, the scripts whose letters pass for
// Latin ones in most fonts; it is not the whole list.
func skeleton(name string) string {
	var b strings.Builder
	for _, r := range norm.NFKC.String(name) {
		if unicode.Is(unicode.Cf, r) {
			continue
		}
		if l, ok := latinLookalikes[r]; ok {
			r = l
		}
		b.WriteRune(r)
	}
	return b.String()
}

// readsAsExtension reports whether folded, a skeleton, begins x- and is
// x-idempotency but for one or more characters that are not ASCII, each
// in the place of one of its letters, accents set aside: whatever those
// characters are, they are what makes the key read as the extension and
// not be it. The look-alike table need not know them.
func readsAsExtension(folded string) bool {
	var runes []rune
	for _, r := range norm.NFD.String(folded) {
		if !unicode.Is(unicode.Mn, r) {
			runes = append(runes, r)
		}
	}
	if len(runes) != len(extension) || !strings.EqualFold(string(runes[:2]), extension[:2]) {
		return false
	}
	for i, r := range runes {
		if r <= unicode.MaxASCII && unicode.ToLower(r) != rune(extension[i]) {
			return false
		}
	}
	return strings.ContainsFunc(folded, func(r rune) bool { return r > unicode.MaxASCII })
}

var latinLookalikes = map[rune]rune{
	// Cyrillic
	'а': 'a', 'е': 'e', 'ё': 'e', 'һ': 'h', 'і': 'i', 'ї': 'i', 'ј': 'j', 'ӏ': 'l',
	'о': 'o', 'р': 'p', 'ԛ': 'q', 'ѕ': 's', 'ѵ': 'v', 'ԝ': 'w', 'х': 'x', 'у': 'y', 'ү': 'y', 'с': 'c',
	'ԁ': 'd', 'ɡ': 'g',
	'А': 'A', 'В': 'B', 'С': 'C', 'Е': 'E', 'Н': 'H', 'І': 'I', 'Ј': 'J', 'К': 'K', 'М': 'M', 'О': 'O',
	'Р': 'P', 'Ѕ': 'S', 'Т': 'T', 'Х': 'X', 'У': 'Y', 'Ү': 'Y', 'Ԁ': 'D', 'Ԛ': 'Q', 'Ԝ': 'W',
	// Greek
	'α': 'a', 'ε': 'e', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'χ': 'x',
	'γ': 'y', 'ϲ': 'c', 'ϳ': 'j',
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Ζ': 'Z', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M', 'Ν': 'N', 'Ο': 'O',
	'Ρ': 'P', 'Τ': 'T', 'Υ': 'Y', 'Χ': 'X', 'Ϲ': 'C',
	// Dashes
	'‐': '-', '‑': '-', '‒': '-', '–': '-', '—': '-', '−': '-', '﹣': '-',
}

// checkSpelling reports the extensions of the mapping n that look like
// x-idempotency and are not: idemgen would ignore them.
func (l *loader) checkSpelling(n *yaml.Node) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		l.checkLookalike(n.Content[i], extensionLookalike(n.Content[i].Value))
	}
}

// checkLookalike reports the key k, which resembles x-idempotency as
// kind says.
func (l *loader) checkLookalike(k *yaml.Node, kind lookalike) {
	switch kind {
	case nearMiss:
		l.report("").warnf(l.t.pos(k), "", "%s is not an extension idemgen reads, so it is ignored (did you mean %s?)", k.Value, extension)
	case confusable:
		l.report("").errorf(l.t.pos(k), "", "%s reads as %s but is another key: it is spelt with %s, and idemgen reads the extension spelt in ASCII only, so the policy would be ignored; type it again in ASCII",
			k.Value, extension, foreignRunes(k.Value))
	case otherCase:
		l.report("").errorf(l.t.pos(k), "", "%s is not %s: extension names are case-sensitive, and idemgen reads the extension in lower case only, so the policy would be ignored; write %s",
			k.Value, extension, extension)
	}
}

// foreignRunes names the characters of name that are not ASCII.
func foreignRunes(name string) string {
	var out []string
	for _, r := range name {
		if s := fmt.Sprintf("U+%04X", r); r > unicode.MaxASCII && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return "characters that only look like its own (" + strings.Join(out, ", ") + ")"
}

// checkMisplaced reports an x-idempotency, or a key that reads as one,
// anywhere below the members of the path item of path that idemgen reads
// it on (the operations): inside a request body, among the responses, in
// a parameter or a schema, indented a level too deep, it is a policy
// idemgen never sees. It does not follow $refs nor aliases (what they
// name is checked where it is written, if under a path item), nor look
// into values that are data (examples, defaults) or other extensions',
// nor into callbacks: their operations are requests the API sends, which
// idemgen does not protect, and a policy there may document the
// receiver's.
func (l *loader) checkMisplaced(path string, item *yaml.Node) {
	var walk func(n *yaml.Node, where string, names bool)
	walk = func(n *yaml.Node, where string, names bool) {
		switch n.Kind {
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, where, false)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if !names {
					if k.Value == extension {
						l.report("").errorf(l.t.pos(k), "", "%s inside %s has no effect: idemgen reads it on the operation only (beside operationId); move it there",
							extension, where)
						continue
					}
					if kind := extensionLookalike(k.Value); kind == confusable || kind == otherCase {
						l.checkLookalike(k, kind)
					}
					if notWalked(k.Value) {
						continue
					}
				}
				walk(v, where, !names && (k.Value == "properties" || k.Value == "patternProperties"))
			}
		}
	}
	for _, m := range pairs(item) {
		switch {
		case m.key.Value == extension || strings.HasPrefix(m.key.Value, "x-"):
			// the path item's own extensions: checkSpelling, and run
			continue
		case m.key.Value == "additionalOperations":
			for _, op := range pairs(m.val) {
				l.checkOperationMembers(path, op.key.Value, op.val, walk)
			}
		case isMethod(m.key.Value):
			l.checkOperationMembers(path, strings.ToUpper(m.key.Value), m.val, walk)
		default:
			walk(m.val, fmt.Sprintf("the path item %s's %s", path, m.key.Value), false)
		}
	}
}

// notWalked reports whether checkMisplaced leaves the value of the
// member key alone: an extension's, data, or callbacks.
func notWalked(key string) bool {
	return strings.HasPrefix(key, "x-") || dataKeys[key] || key == "callbacks"
}

// checkOperationMembers checks the members of one operation: its own
// extensions for spelling, the rest with walk.
func (l *loader) checkOperationMembers(path, method string, op *yaml.Node, walk func(*yaml.Node, string, bool)) {
	l.checkSpelling(op)
	for _, m := range pairs(op) {
		if notWalked(m.key.Value) {
			continue
		}
		walk(m.val, fmt.Sprintf("%s %s's %s", method, path, m.key.Value), false)
	}
}

// isMethod reports whether name is one of a path item's method fields.
func isMethod(name string) bool {
	return slices.Contains(methods, name)
}
