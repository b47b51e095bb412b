package templates

import (
	"embed"
	"fmt"
)

//go:embed docs/*.tmpl
var docsFiles embed.FS

// DocsTemplate returns the text/template source of the generated API
// documentation page. The generator's docgen package executes it; keeping
// it here lets the page's wording change without touching Go code.
func DocsTemplate() (string, error) {
	b, err := docsFiles.ReadFile("docs/api.md.tmpl")
	if err != nil {
		return "", fmt.Errorf("templates: docs template: %w", err)
	}
	return string(b), nil
}
