package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// codeMark names where the code block after it comes from: a file,
	// relative to the page, and optionally a region of it.
	//
	//	<!-- code: servemux/main.go#mount -->
	codeMark = regexp.MustCompile(`^<!-- code: ([^ #]+)(?:#([\w-]+))? -->$`)
	// regionMark begins or ends a region of a source file, in a Go or a
	// YAML comment: "// docs:begin mount", "# docs:end mount".
	regionMark = regexp.MustCompile(`^\s*(?://|#) docs:(begin|end) ([\w-]+)\s*$`)
	// fenceOpen opens a fenced code block and names its language.
	fenceOpen = regexp.MustCompile("^```(\\w*)")
)

// TestStackPagesShowCompiledCode: every Go block of a stack page and of
// effects.md is marked with the file it comes from, and every marked block
// of the README and those pages is, byte for byte, that file or the named
// region of it.
// The files are the stack modules CI builds, vets and tests, so the code a
// reader copies compiles and does what the page says.
func TestStackPagesShowCompiledCode(t *testing.T) {
	stacks, _ := filepath.Glob(filepath.Join("stacks", "*.md"))
	if len(stacks) == 0 {
		t.Fatal("no stack pages in docs/stacks")
	}
	for _, page := range append(stacks, "effects.md", filepath.Join(root, "README.md")) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range codeBlocks(string(text)) {
			where := fmt.Sprintf("%s:%d", page, b.line)
			if b.source == "" {
				if b.lang == "go" && (filepath.Dir(page) == "stacks" || page == "effects.md") {
					t.Errorf("%s: a Go block without a <!-- code: FILE#REGION --> line before it", where)
				}
				continue
			}
			want, err := region(filepath.Join(filepath.Dir(page), b.source), b.region)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if b.body != want {
				t.Errorf("%s: the block differs from %s#%s; copy the file's text:\n%s", where, b.source, b.region, want)
			}
		}
	}
}

// block is a fenced code block of a page, and the file and region the
// line before it names.
type block struct {
	line           int
	lang, body     string
	source, region string
}

// codeBlocks returns the fenced code blocks of a Markdown text.
func codeBlocks(text string) []block {
	var blocks []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := block{line: i + 1, lang: m[1]}
		if i > 0 {
			if c := codeMark.FindStringSubmatch(lines[i-1]); c != nil {
				b.source, b.region = c[1], c[2]
			}
		}
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		b.body = strings.Join(body, "\n")
		blocks = append(blocks, b)
	}
	return blocks
}

// region returns the text of a file between "docs:begin name" and
// "docs:end name" (all of it when name is empty), without the lines that
// mark regions and without the indentation its lines share.
func region(path, name string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var out []string
	in, found := name == "", false
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		m := regionMark.FindStringSubmatch(l)
		switch {
		case m != nil && m[2] == name && m[1] == "begin":
			in, found = true, true
		case m != nil && m[2] == name && m[1] == "end":
			in = false
		case m == nil && in:
			out = append(out, l)
		}
	}
	if name != "" && !found {
		return "", fmt.Errorf("%s has no region %q (// docs:begin %s)", path, name, name)
	}
	for len(out) > 0 && strings.TrimSpace(out[0]) == "" {
		out = out[1:]
	}
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
		out = out[:len(out)-1]
	}
	return dedent(out), nil
}

// dedent removes the leading tabs and spaces that every non-blank line
// shares.
func dedent(lines []string) string {
	prefix, set := "", false
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lead := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if !set {
			prefix, set = lead, true
		}
		for !strings.HasPrefix(lead, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, prefix)
	}
	return strings.Join(lines, "\n")
}
