// Package docgen writes the API documentation page that tells clients,
// per operation, where the idempotency key goes, how long it is remembered
// and what a retry meets (docs/semantics.md §4: the TTL and scope of every
// operation are documented).
package docgen

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/idemgen/idemgen/generator/internal/describe"
	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/templates"
)

// Options says how the page is rendered.
type Options struct {
	// Source is the spec path relative to the page's directory,
	// slash-separated; it is written into the header.
	Source string
}

// page is what the template reads.
type page struct {
	Source     string
	Title      string
	Version    string
	Operations []operation
	Errors     []errorRow
	// Answers and ReplayedHeader are the wire words the prose cites, from
	// runtime/problem, so that the page never restates them.
	Answers        answers
	ReplayedHeader string
}

// answers are the engine's answers the page's prose cites, each as its
// status and Markdown-quoted name ("409 `request-in-progress`").
type answers struct {
	KeyRequired, KeyReused, StillRunning, NotKept string
}

func pageAnswers() answers {
	return answers{
		KeyRequired:  cite(problem.KeyRequired),
		KeyReused:    cite(problem.KeyReusedRequest),
		StillRunning: cite(problem.StillRunning),
		NotKept:      cite(problem.ResponseTooLarge),
	}
}

// cite writes an answer as its status and its name in Markdown code.
func cite(a problem.Answer) string { return strconv.Itoa(a.Status()) + " " + code(a.Name()) }

// errorRow is one problem type a client can meet, as the Errors table
// lists it.
type errorRow struct {
	Status                int
	Name, Meaning, Advice string
}

// errorRows lists the engine's answers that client docs describe
// (runtime/problem), by status; answers of one status keep the table's
// order.
func errorRows() []errorRow {
	var rows []errorRow
	for _, a := range problem.Answers() {
		if a.Meaning() != "" {
			rows = append(rows, errorRow{Status: a.Status(), Name: a.Name(), Meaning: a.Meaning(), Advice: a.Advice()})
		}
	}
	slices.SortStableFunc(rows, func(a, b errorRow) int { return a.Status - b.Status })
	return rows
}

// operation holds one operation's policy as finished phrases, so the
// template stays free of logic.
type operation struct {
	// ID and Route are Markdown code (or escaped text); Heading and
	// Summary escaped text.
	ID, Route, Heading, Anchor, Summary string
	Key, KeyShort                       string
	KeyCharacters                       string // what a key may hold
	KeyMaxLength                        int
	Required, TenantScope               bool
	Scope, TTL, Lease, LeaseExpiry      string
	Fingerprint                         string
	Stored, ReplayHeaders               string
	MaxSnapshot                         string
}

// Emit renders the documentation page of spec.
func Emit(spec *model.Spec, opts Options) ([]byte, error) {
	src, err := templates.DocsTemplate()
	if err != nil {
		return nil, fmt.Errorf("docgen: %w", err)
	}
	tmpl, err := template.New("api.md").Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, fmt.Errorf("docgen: parse template: %w", err)
	}
	p := page{Source: commentText(opts.Source), Title: text(spec.Title), Version: text(spec.Version), Errors: errorRows(),
		Answers: pageAnswers(), ReplayedHeader: problem.ReplayedHeader}
	for _, op := range spec.Operations {
		p.Operations = append(p.Operations, describeOp(op))
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("docgen: execute template: %w", err)
	}
	return buf.Bytes(), nil
}

func describeOp(op model.Operation) operation {
	p := op.Policy
	o := operation{
		ID:           code(op.ID),
		Route:        code(op.Method + " " + op.Path),
		Heading:      text(op.Method + " " + op.Path),
		Anchor:       anchor(op.Method + " " + op.Path),
		Summary:      text(op.Summary),
		KeyMaxLength: p.KeyMaxLength,
		Required:     p.Required,
		TenantScope:  p.Scope == model.ScopeTenant,
		Scope:        describe.Scope(p),
		TTL:          describe.Words(p.TTL),
		Lease:        describe.Words(p.Lease),
		Fingerprint:  fingerprint(op),
		MaxSnapshot:  describe.Size(p.MaxSnapshotBytes),
	}
	o.KeyCharacters = "visible ASCII characters"
	switch p.KeyIn {
	case key.InBody:
		o.KeyCharacters = "characters (Unicode code points) without control characters or spaces"
		o.KeyShort = "body field " + code(p.KeyName)
		o.Key = "the body field " + code(p.KeyName)
	case key.InQuery:
		o.KeyShort = "query parameter " + code(p.KeyName)
		o.Key = "the query parameter " + code(p.KeyName)
	default:
		o.KeyShort = "header " + code(p.KeyName)
		o.Key = "the " + code(p.KeyName) + " header"
	}
	if p.OnLeaseExpiry == model.Takeover {
		o.LeaseExpiry = "the next retry takes the key over and runs the operation again."
		if p.Transactional {
			o.LeaseExpiry = "the next retry takes the key over and runs the operation again; the operation's effects and the key are committed together, so nothing is applied twice."
		}
	} else {
		o.LeaseExpiry = "its outcome counts as unknown: retries get " + cite(problem.Interrupted) + " until an operator resolves the key."
	}
	var clientErrs, serverErrs []string
	for _, s := range idemstore.NeverStoredStatuses() {
		if s < 500 {
			clientErrs = append(clientErrs, strconv.Itoa(s))
		} else {
			serverErrs = append(serverErrs, strconv.Itoa(s))
		}
	}
	stored := "Every 2xx, 3xx and 4xx response is kept and replayed, except " + list(clientErrs) + ", which a retry runs again."
	if p.CacheServerErrors {
		o.Stored = stored + " A 500 is kept and replayed too; " + list(serverErrs) + " are not."
	} else {
		o.Stored = stored + " 5xx responses are not kept, so a retry runs the operation again."
	}
	headers := append(idem.AlwaysReplayed(), p.ReplayHeaders...)
	o.ReplayHeaders = "(" + list(quoteAll(headers)) + ")"
	return o
}

// fingerprint says which parts of the request make it "the same request".
func fingerprint(op model.Operation) string {
	p := op.Policy
	var parts []string
	switch {
	case len(p.Fingerprint) > 0:
		ptrs := make([]string, len(p.Fingerprint))
		for i, f := range p.Fingerprint {
			ptrs[i] = f.Pointer
		}
		parts = append(parts, plural("the body field ", "the body fields ", quoteAll(ptrs)))
	case op.BodyMediaType == "":
		// No body: only path and query parameters remain.
	case p.KeyIn == key.InBody:
		parts = append(parts, "the whole request body except "+code(p.KeyName))
	default:
		parts = append(parts, "the whole request body")
	}
	if len(op.PathParams) > 0 {
		parts = append(parts, plural("the path parameter ", "the path parameters ", quoteAll(op.PathParams)))
	}
	if len(p.Query) > 0 {
		parts = append(parts, plural("the query parameter ", "the query parameters ", quoteAll(p.Query)))
	}
	if len(parts) == 0 {
		return "every request with the key counts as the same request."
	}
	return "a retry must repeat " + list(parts) + " of the first request; one that differs is rejected with " + cite(problem.KeyReusedRequest) + "."
}

func plural(one, many string, items []string) string {
	if len(items) == 1 {
		return one + items[0]
	}
	return many + list(items)
}

// quoteAll writes each of ss as Markdown code.
func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = code(s)
	}
	return out
}

// list joins items as English does: "a", "a and b", "a, b and c".
func list(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// anchor is the fragment GitHub and most Markdown renderers give a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
