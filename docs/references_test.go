// Package docs_test checks that the documentation says only what the
// repository holds: every section a comment cites exists, and every page a
// document links to is there.
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the module's root, seen from this package's directory.
const root = ".."

// sectionSign is the section sign, spelt as an escape so that this file's
// own patterns and messages are not taken for citations.
const sectionSign = "\u00a7"

var (
	// sectionRef is one cited section, such as 3 or 3.4 after the sign.
	sectionRef = regexp.MustCompile(sectionSign + `(\d+(?:\.\d+)*)`)
	// citationGlue is what may stand between a document's name and the
	// sections cited from it: spaces, line breaks with their comment
	// markers, list words, and the sections cited before in the same list.
	citationGlue = regexp.MustCompile(`(?:\s|//|--|,|\(|\band|\bor|` + sectionSign + `\d+(?:\.\d+)*)*$`)
	// contractName ends a text that cites the contract: docs/semantics.md,
	// or within docs a link to semantics.md.
	contractName = regexp.MustCompile(`(?:docs/)?semantics\.md(?:\]\([^)\s]*\))?$`)
	// rfcName ends a text that cites an RFC, whose sections are not ours.
	rfcName = regexp.MustCompile(`RFC\s*\d+$`)
	// heading is a numbered heading of the contract: "## 3. What …" or
	// "### 3.4 The …".
	heading = regexp.MustCompile(`(?m)^#{2,6} (\d+(?:\.\d+)*)\.? `)
	// codeSpan and codeFence are Markdown code, where "](" is not a link.
	codeFence = regexp.MustCompile("(?ms)^```.*?^```")
	codeSpan  = regexp.MustCompile("`[^`\n]*`")
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// TestContractCitationsResolve: every section sign in the repository's Go,
// Markdown and SQL files belongs to a citation of a named document, every
// citation of the contract names a section docs/semantics.md has, and the
// contract is cited under that name only.
func TestContractCitationsResolve(t *testing.T) {
	contract, err := os.ReadFile("semantics.md")
	if err != nil {
		t.Fatalf("the contract: %v", err)
	}
	sections := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(string(contract), -1) {
		sections[m[1]] = true
	}
	for _, want := range []string{"1", "2", "3", "3.4", "3.5", "3.6", "4", "5", "6", "7", "7.4"} {
		if !sections[want] {
			t.Errorf("docs/semantics.md has no section %s", want)
		}
	}
	oldName := strings.ToUpper("semantics")
	walkSources(t, func(path, text string) {
		if i := strings.Index(text, oldName); i >= 0 {
			t.Errorf("%s:%d: cites %s; the contract is docs/semantics.md", path, line(text, i), oldName)
		}
		own := filepath.ToSlash(path) == "docs/semantics.md"
		for _, m := range sectionRef.FindAllStringSubmatchIndex(text, -1) {
			at, section := m[0], text[m[2]:m[3]]
			before := text[max(0, at-300):at]
			before = before[:citationGlue.FindStringIndex(before)[0]]
			switch {
			case rfcName.MatchString(before):
			case contractName.MatchString(before) || own:
				if !sections[section] {
					t.Errorf("%s:%d: cites docs/semantics.md %s%s, a section it does not have", path, line(text, at), sectionSign, section)
				}
			default:
				t.Errorf("%s:%d: %s%s names no document; write docs/semantics.md %s%s (or the RFC it belongs to)",
					path, line(text, at), sectionSign, section, sectionSign, section)
			}
		}
	})
}

// TestDocumentLinksResolve: every relative link in the README, the
// changelog, docs/, docs/stacks/ and the examples' READMEs leads to a file
// of the repository, and every anchor in it to a heading of that page.
func TestDocumentLinksResolve(t *testing.T) {
	var pages []string
	for _, glob := range []string{"*.md", "stacks/*.md", "../*.md", "../examples/*/README.md"} {
		found, _ := filepath.Glob(glob)
		pages = append(pages, found...)
	}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := codeSpan.ReplaceAllString(codeFence.ReplaceAllString(string(b), ""), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, ":") {
				continue // a URL
			}
			file := page
			if target != "" {
				file = filepath.Join(filepath.Dir(page), target)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, m[1])
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(t, file)[anchor] {
				t.Errorf("%s links to %s, but %s has no heading with that anchor", page, m[1], file)
			}
		}
	}
}

// anchors returns the anchors of a Markdown page's headings, as GitHub
// writes them: lower case, punctuation dropped, spaces as hyphens.
func anchors(t *testing.T, page string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(codeFence.ReplaceAllString(string(b), ""), -1) {
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(m[1]))
		found[slug] = true
	}
	return found
}

// walkSources calls f with every Go and Markdown file of the module, by
// its path from the module's root.
func walkSources(t *testing.T, f func(path, text string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext != ".go" && ext != ".md" && ext != ".sql" {
			return nil
		}
		if filepath.Base(filepath.Dir(path)) == "released" {
			// Migrations as a release shipped them, kept to test upgrades.
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		f(rel, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// line is the line number of byte i of text.
func line(text string, i int) int { return strings.Count(text[:i], "\n") + 1 }
