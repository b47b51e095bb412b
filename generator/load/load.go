package load

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// Options tune Load.
type Options struct {
	// DisplayName is the spec path shown in diagnostics and recorded as
	// model.Spec.Source; empty means the path given to Load, as given.
	DisplayName string
	// Operations, when set, receives how many operations opt in to a
	// policy, those with errors too (the spec is nil then), for a summary
	// line such as "2 errors in 14 operations".
	Operations *int
	// BasePath, when set, is the prefix the service is served under,
	// taken instead of what the spec's servers say ("/" for none).
	BasePath string
}

// ErrNotOpenAPI3 is wrapped by Load's error when the file is YAML or JSON
// but not an OpenAPI 3.x document.
var ErrNotOpenAPI3 = errors.New("not an OpenAPI 3.x document")

// The methods of an OpenAPI path item, lower case as the spec writes them.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace", "query"}

// Load reads the spec at path, validates every x-idempotency policy and
// returns the policy model. err is for problems that stop reading at all
// (the file is missing, is not YAML or JSON, is not OpenAPI 3.x); everything
// about the spec's content is a Diagnostic, errors and warnings sorted by
// file, line, column and message. spec is nil when any Diagnostic is an
// Error.
func Load(ctx context.Context, path string, opts Options) (*model.Spec, []model.Diagnostic, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("spec %s: %w", path, err)
		}
		return nil, nil, fmt.Errorf("read spec: %w", err)
	}
	display := opts.DisplayName
	if display == "" {
		display = path
	}
	return LoadData(ctx, data, display, opts)
}

// LoadData is Load for a document already in memory; file is the name shown
// in diagnostics. Only local $refs are followed.
func LoadData(ctx context.Context, data []byte, file string, opts Options) (*model.Spec, []model.Diagnostic, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", file, err)
	}
	t, err := parseTree(data, file)
	if err != nil {
		return nil, nil, err
	}
	return loadTree(ctx, t, opts)
}

// loadTree is LoadData from the parsed tree on.
func loadTree(ctx context.Context, t *tree, opts Options) (*model.Spec, []model.Diagnostic, error) {
	file := t.file
	if err := checkVersion(t); err != nil {
		return nil, nil, err
	}
	t.neutralizeRefs()
	items := t.resolvePathItems()

	doc := &openapi3.T{}
	if err := doc.UnmarshalYAML(t.root); err != nil {
		return nil, t.diags, fmt.Errorf("%s: %w: %w", file, ErrNotOpenAPI3, err)
	}
	l := &loader{t: t, doc: doc, items: items, opts: opts, diags: t.diags, facts: newSchemaFacts()}
	loader := openapi3.NewLoader()
	loader.Context = ctx
	loader.IsExternalRefsAllowed = false
	if err := loader.ResolveRefsIn(doc, nil); err != nil {
		// neutralizeRefs removed what does not resolve, so this is a
		// reference of the wrong kind or a shape kin refuses.
		l.report("").errorf(t.refPos(err.Error()), "", "cannot resolve the document's references: %s", oneLine(err.Error()))
		return l.finish(nil)
	}
	l.validationCtx = openapi3.WithValidationOptions(ctx, validationOptions(doc)...)
	return l.finish(l.run())
}

func validationOptions(doc *openapi3.T) []openapi3.ValidationOption {
	opts := []openapi3.ValidationOption{
		openapi3.DisableExamplesValidation(),
		openapi3.DisableSchemaDefaultsValidation(),
		openapi3.DisableSchemaPatternValidation(),
		openapi3.DisableSchemaFormatValidation(),
		openapi3.AllowExtensionsWithRef(),
	}
	if doc.IsOpenAPI31OrLater() {
		opts = append(opts, openapi3.IsOpenAPI31OrLater())
	}
	return opts
}

func checkVersion(t *tree) error {
	if _, v := get(t.root, "swagger"); v != nil {
		return fmt.Errorf("%s: %w: it is Swagger %s; convert it to OpenAPI 3 first", t.file, ErrNotOpenAPI3, v.Value)
	}
	_, v := get(t.root, "openapi")
	if v == nil || v.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s: %w: it has no openapi version field", t.file, ErrNotOpenAPI3)
	}
	if !strings.HasPrefix(v.Value, "3.") {
		return fmt.Errorf("%s:%d:%d: %w: openapi is %q", t.file, v.Line, v.Column, ErrNotOpenAPI3, v.Value)
	}
	return nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// loader holds one Load's state.
type loader struct {
	t             *tree
	doc           *openapi3.T
	items         map[string]pathItem // by path (resolvePathItems)
	opts          Options
	validationCtx context.Context
	diags         []model.Diagnostic
	// facts are what the policy checks work out about the request-body
	// schemas, shared by every operation.
	facts *schemaFacts
	// schemaErrs are kin-openapi's validation of the schemas validate has
	// looked at, each worked out once.
	schemaErrs map[*openapi3.Schema]error
	// reported holds the lifetime conflicts already reported, so that one
	// in the document's defaults is reported once, not once per operation
	// that inherits it.
	reported map[string]bool
}

func (l *loader) report(op string) reporter {
	return reporter{op: op, diags: &l.diags}
}

func (l *loader) finish(spec *model.Spec) (*model.Spec, []model.Diagnostic, error) {
	l.brokenRefWarnings()
	l.diags = foldOperations(l.diags)
	model.SortDiagnostics(l.diags)
	if model.HasErrors(l.diags) {
		return nil, l.diags, nil
	}
	return spec, l.diags, nil
}

// run walks the annotated operations and builds the model.
func (l *loader) run() *model.Spec {
	spec := &model.Spec{Source: l.t.file}
	if l.doc.Info != nil {
		spec.Title = l.doc.Info.Title
		spec.Version = l.doc.Info.Version
	}

	var defaults *layer
	docKey, docVal := get(l.t.root, extension)
	if docKey != nil {
		if docVal.Kind != yaml.MappingNode {
			l.report("").errorf(l.t.pos(docKey), "", "the document-level %s must be an object of defaults, not %s; operations opt in with %s: true",
				extension, describe(docVal), extension)
		} else {
			defaults = decodeLayer(l.t, docKey, docVal, l.report(""))
			l.checkDefaults(defaults)
			l.checkLifetimes(true, scoped{defaults, l.report("")})
		}
	}
	if defaults == nil {
		defaults = &layer{}
	}

	optedIn := 0
	l.checkSpelling(l.t.root)
	_, paths := get(l.t.root, "paths")
	for _, p := range pairs(paths) {
		path := p.key.Value
		at, ok := l.items[path]
		if !ok {
			continue // it cannot be read, which is reported
		}
		item := at.node
		l.checkSpelling(item)
		l.checkMisplaced(path, item)
		if k, _ := get(item, extension); k != nil {
			l.report("").errorf(l.t.pos(k), "", "%s on the path item %s has no effect; put it on the operation (post: or patch:)", extension, path)
		}
		optedIn += l.additionalOperations(path, item)
		for _, m := range methods {
			mKey, opNode := get(item, m)
			if mKey == nil {
				continue
			}
			extKey, extVal := get(opNode, extension)
			if extKey == nil {
				continue
			}
			if declined(extVal) {
				continue
			}
			optedIn++
			if op, ok := l.operation(path, strings.ToUpper(m), opNode, extKey, extVal, defaults); ok {
				spec.Operations = append(spec.Operations, op)
			}
		}
	}
	if l.opts.Operations != nil {
		*l.opts.Operations = optedIn
	}
	if docKey != nil && docVal.Kind == yaml.MappingNode && optedIn == 0 {
		l.report("").warnf(l.t.pos(docKey), "", "the document-level %s sets defaults, but no operation opts in with %s: true or an object, so they apply to nothing",
			extension, extension)
	}

	slices.SortFunc(spec.Operations, func(a, b model.Operation) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	l.checkOverlaps(spec.Operations)
	spec.Unprotected = l.unprotected(spec.Operations)
	l.checkServeMuxPaths(spec.Operations)
	if len(spec.Operations) > 0 {
		spec.BasePath = l.basePath(spec.Operations)
	}
	l.checkScopeIDs(spec.Operations, defaults)
	// Go names that clash are the Go emitter's to judge (gocode.CheckNames):
	// it alone knows every name it declares.
	return spec
}

// checkOverlaps refuses two protected operations of one method whose
// templates match the same requests with neither more specific: the engine
// refuses to start with such a pair, since a request would be one
// operation's or the other's by accident.
func (l *loader) checkOverlaps(ops []model.Operation) {
	tmpls := make([]*pathtemplate.Template, len(ops))
	for i, op := range ops {
		tmpls[i], _ = pathtemplate.Parse(op.Path)
	}
	for i := range ops {
		for j := range i {
			if ops[i].Method == ops[j].Method && tmpls[i] != nil && tmpls[j] != nil && pathtemplate.Overlap(tmpls[i], tmpls[j]) {
				l.report(opLabel(ops[i])).errorf(ops[i].Pos, "", "its path matches the same requests as %s and neither is more specific; make one path's literal text differ",
					opLabel(ops[j]))
			}
		}
	}
}

// additionalOperations refuses a policy among the path item's
// additionalOperations (OpenAPI 3.2), which kin-openapi lists with the
// path item's operations and so a router generated from it serves: POST
// and PATCH belong in their own fields, where idemgen reads them, and
// the other methods may not have one. It returns how many operations
// there opt in.
func (l *loader) additionalOperations(path string, item *yaml.Node) int {
	optedIn := 0
	_, extra := get(item, "additionalOperations")
	for _, p := range pairs(extra) {
		extKey, extVal := get(p.val, extension)
		if extKey == nil || declined(extVal) {
			continue
		}
		optedIn++
		method := p.key.Value
		if field := strings.ToLower(method); field == "post" || field == "patch" {
			l.report("").errorf(l.t.pos(extKey), "", "%s on %s %s in additionalOperations is not read: OpenAPI keeps %s out of additionalOperations for its own field, %s:; move the operation there",
				extension, method, path, strings.ToUpper(method), field)
			continue
		}
		l.report("").errorf(l.t.pos(extKey), "", "%s is not allowed on %s %s in additionalOperations: idemgen protects POST and PATCH operations only; remove the extension",
			extension, method, path)
	}
	return optedIn
}

// pathPos is where the character at offset of a path key is in the spec:
// the path's key, moved to that character when the key is written on one
// line (offset < 0 is the key itself).
func (l *loader) pathPos(path string, offset int) model.Pos {
	_, paths := get(l.t.root, "paths")
	for _, p := range pairs(paths) {
		if p.key.Value != path {
			continue
		}
		pos := l.t.pos(p.key)
		if offset >= 0 {
			switch p.key.Style {
			case 0:
				pos.Col += offset
			case yaml.SingleQuotedStyle, yaml.DoubleQuotedStyle:
				if !strings.ContainsAny(path, "'\\\"") {
					pos.Col += offset + 1
				}
			}
		}
		return pos
	}
	return model.Pos{File: l.t.file}
}

// queryInPath warns about a path key with a query string, at its "?"
// (path[at]). No router matches a query string as part of a path, and the
// runtime parses templates as routers do, so the operation cannot be
// protected as written; the rest of the spec still is, and the warning
// says the two ways to write it that can be.
func (l *loader) queryInPath(r reporter, path, method string, at int) {
	base, query := path[:at], path[at+1:]
	var names []string
	if values, err := url.ParseQuery(query); err == nil {
		for name := range values {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	how := "declare its parameters as query parameters of " + method + " " + base + " and list them"
	switch len(names) {
	case 0:
	case 1:
		how = "declare " + names[0] + " as a query parameter of " + method + " " + base + " and list it"
	default:
		how = "declare " + strings.Join(names, ", ") + " as query parameters of " + method + " " + base + " and list them"
	}
	r.warnf(l.pathPos(path, at), "", "the path has a query string (?%s), which no router matches as part of a path, so this operation is left unprotected and the rest is generated. Give it a path of its own, or %s in that operation's %s query, so that its fingerprint tells the requests apart",
		query, how, extension)
}

// declined reports whether an operation's x-idempotency value is false:
// the operation is left alone.
func declined(v *yaml.Node) bool {
	return v.Kind == yaml.ScalarNode && v.Tag == tagBool && isFalse(v.Value)
}

func isFalse(s string) bool {
	switch strings.ToLower(s) {
	case "false", "no", "off":
		return true
	}
	return false
}

func opLabel(op model.Operation) string {
	return fmt.Sprintf("%s %s (%s)", op.Method, op.Path, op.ID)
}

// checkDefaults warns about document-level defaults that are usually
// set per operation.
func (l *loader) checkDefaults(d *layer) {
	r := l.report("")
	if d.fingerprint.ok {
		r.warnf(d.fingerprint.pos, "fingerprint", "a document-level fingerprint applies to the request body of every annotated operation; it is usually set per operation")
	}
	if d.query.ok {
		r.warnf(d.query.pos, "query", "a document-level query list applies to every annotated operation; it is usually set per operation")
	}
}

// pick returns the operation's setting, else the document's, else def,
// with the position it came from (fallback when it is the built-in default).
func pick[T any](op, doc setting[T], def T, fallback model.Pos) (T, model.Pos) {
	if op.ok {
		return op.v, op.pos
	}
	if doc.ok {
		return doc.v, doc.pos
	}
	return def, fallback
}

// operation builds one annotated operation and checks its policy.
func (l *loader) operation(path, method string, opNode, extKey, extVal *yaml.Node, defaults *layer) (model.Operation, bool) {
	kinItem := l.doc.Paths.Value(path)
	var kinOp *openapi3.Operation
	if kinItem != nil {
		kinOp = kinItem.GetOperation(method)
	}
	op := model.Operation{Method: method, Path: path, Pos: l.t.pos(extKey), Item: l.items[path].at}
	if kinOp != nil {
		op.ID = kinOp.OperationID
		op.Summary = kinOp.Summary
	}
	if op.ID == "" {
		op.ID = deriveID(method, path)
		op.DerivedID = true
	}
	op.GoName = goName(op.ID)
	r := l.report(opLabel(op))

	if method != "POST" && method != "PATCH" {
		r.errorf(op.Pos, "", "%s is not allowed on %s: %s is idempotent by definition (RFC 9110 §9.2.2), so repeating it is already safe; remove the extension",
			extension, method, method)
		return op, false
	}
	var own *layer
	switch {
	case extVal.Kind == yaml.ScalarNode && extVal.Tag == tagBool:
		own = &layer{pos: op.Pos}
	case extVal.Kind == yaml.MappingNode:
		own = decodeLayer(l.t, extKey, extVal, r)
	default:
		r.errorf(op.Pos, "", "%s must be true, false or an object, not %s", extension, describe(extVal))
		return op, false
	}

	if i := strings.IndexByte(path, '?'); i >= 0 {
		l.queryInPath(r, path, method, i)
		return op, false
	}
	tmpl, err := pathtemplate.Parse(path)
	if err != nil {
		off := -1
		var se *pathtemplate.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		}
		r.errorf(l.pathPos(path, off), "", "%v; the runtime cannot serve this operation (it parses templates the same way)", err)
		return op, false
	}
	op.PathParams = tmpl.Params()

	c := &opCheck{l: l, r: r, op: &op, kinOp: kinOp, opNode: opNode, own: own, def: defaults}
	if kinItem != nil {
		c.itemNode = l.pathItemNode(path)
	}
	c.resolve()
	return op, true
}

// pathItemNode returns the node of a path item, following its $refs.
func (l *loader) pathItemNode(path string) *yaml.Node {
	return l.items[path].node
}

// mediaTypes returns the media types of a content map, without parameters.
func mediaTypes(c openapi3.Content) map[string]*openapi3.MediaType {
	out := make(map[string]*openapi3.MediaType, len(c))
	for raw, mt := range c {
		name, _, err := mime.ParseMediaType(raw)
		if err != nil {
			name = strings.ToLower(strings.TrimSpace(raw))
		}
		if _, dup := out[name]; !dup {
			out[name] = mt
		}
	}
	return out
}

// isJSONMediaType is the runtime's reading of a JSON media type.
func isJSONMediaType(mt string) bool { return fingerprint.IsJSON(mt) }

const formMediaType = "application/x-www-form-urlencoded"

func isStreaming(mt string) bool {
	switch mt {
	case "text/event-stream", "application/x-ndjson", "application/jsonl", "application/json-seq",
		"application/stream+json", "application/x-json-stream":
		return true
	}
	return strings.HasPrefix(mt, "multipart/")
}
