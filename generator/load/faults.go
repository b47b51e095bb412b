package load

import (
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
)

// validate runs kin-openapi's validation over what the generated code
// depends on: the operation's parameters and request body. Its complaints
// are warnings; faults idemgen relies on were judged above. kin says what
// is wrong but not where, wrapped in the path it took ("invalid oneOf
// element: invalid anyOf element: …"), so each complaint is traced down to
// the schema that fails by itself and reported there, by JSON Pointer and
// line: a schema that many operations share is one thing to fix, and the
// fold (foldOperations) says it once.
func (c *opCheck) validate() {
	if c.kinOp == nil {
		return
	}
	ctx := c.l.validationCtx
	base := c.l.operationPointer(c.op.Path, c.op.Method)
	for i, pr := range c.kinOp.Parameters {
		if pr == nil || pr.Value == nil {
			continue
		}
		if _, broken := brokenRefIndex(pr.Value.Extensions); broken {
			continue
		}
		err := pr.Value.Validate(ctx)
		if err == nil {
			continue
		}
		ptr := refOr(pr.Ref, base+"/parameters/"+strconv.Itoa(i))
		if s := pr.Value.Schema; s != nil && s.Value != nil && c.l.schemaErr(s.Value) != nil {
			c.schemaFault(s, ptr+"/schema")
			continue
		}
		c.r.warnf(c.l.pointerPos(ptr, c.op.Pos), "", "the %s parameter %q (%s) does not validate: %s", pr.Value.In, pr.Value.Name, "#"+ptr, oneLine(err.Error()))
	}
	rb := c.kinOp.RequestBody
	if rb == nil || rb.Value == nil {
		return
	}
	if _, broken := brokenRefIndex(rb.Value.Extensions); broken {
		return
	}
	err := rb.Value.Validate(ctx)
	if err == nil {
		return
	}
	ptr := refOr(rb.Ref, base+"/requestBody")
	for _, mt := range sortedKeys(rb.Value.Content) {
		if m := rb.Value.Content[mt]; m != nil && m.Schema != nil && m.Schema.Value != nil && c.l.schemaErr(m.Schema.Value) != nil {
			c.schemaFault(m.Schema, ptr+"/content/"+escapeTokens([]string{mt})[0]+"/schema")
			return
		}
	}
	c.r.warnf(c.l.pointerPos(ptr, c.op.Pos), "", "the request body (%s) does not validate: %s", "#"+ptr, oneLine(err.Error()))
}

// schemaFault reports the schema at the bottom of s's validation failure:
// the first one, going down, whose members all validate.
func (c *opCheck) schemaFault(s *openapi3.SchemaRef, ptr string) {
	onPath := map[*openapi3.Schema]bool{}
	for {
		if local, ok := strings.CutPrefix(s.Ref, "#"); ok {
			ptr = local
		}
		onPath[s.Value] = true
		next, nextPtr := (*openapi3.SchemaRef)(nil), ""
		for _, m := range schemaMembers(s.Value, ptr) {
			if m.s != nil && m.s.Value != nil && !onPath[m.s.Value] && c.l.schemaErr(m.s.Value) != nil {
				next, nextPtr = m.s, m.ptr
				break
			}
		}
		if next == nil {
			break
		}
		s, ptr = next, nextPtr
	}
	c.r.warnf(c.l.pointerPos(ptr, c.op.Pos), "", "the schema %s does not validate: %s", "#"+ptr, oneLine(c.l.schemaErr(s.Value).Error()))
}

// schemaErr is kin-openapi's validation of one schema (its members too),
// worked out once per load.
func (l *loader) schemaErr(s *openapi3.Schema) error {
	if err, ok := l.schemaErrs[s]; ok {
		return err
	}
	err := s.Validate(l.validationCtx)
	if l.schemaErrs == nil {
		l.schemaErrs = map[*openapi3.Schema]error{}
	}
	l.schemaErrs[s] = err
	return err
}

// member is a schema inside another and its JSON Pointer.
type member struct {
	s   *openapi3.SchemaRef
	ptr string
}

// schemaMembers lists the schemas inside v, in a fixed order, with their
// pointers under ptr.
func schemaMembers(v *openapi3.Schema, ptr string) []member {
	var out []member
	one := func(name string, s *openapi3.SchemaRef) {
		if s != nil {
			out = append(out, member{s, ptr + "/" + name})
		}
	}
	list := func(name string, ss openapi3.SchemaRefs) {
		for i, s := range ss {
			one(name+"/"+strconv.Itoa(i), s)
		}
	}
	named := func(name string, ss openapi3.Schemas) {
		keys := make([]string, 0, len(ss))
		for k := range ss {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			one(name+"/"+escapeTokens([]string{k})[0], ss[k])
		}
	}
	named("properties", v.Properties)
	one("items", v.Items)
	one("additionalProperties", v.AdditionalProperties.Schema)
	list("allOf", v.AllOf)
	list("oneOf", v.OneOf)
	list("anyOf", v.AnyOf)
	one("not", v.Not)
	list("prefixItems", v.PrefixItems)
	one("contains", v.Contains)
	named("patternProperties", v.PatternProperties)
	named("dependentSchemas", v.DependentSchemas)
	one("propertyNames", v.PropertyNames)
	one("if", v.If)
	one("then", v.Then)
	one("else", v.Else)
	named("$defs", v.Defs)
	one("contentSchema", v.ContentSchema)
	return out
}

// refOr is the pointer a local $ref names, or ptr when there is none.
func refOr(ref, ptr string) string {
	if local, ok := strings.CutPrefix(ref, "#"); ok {
		return local
	}
	return ptr
}

// operationPointer is the JSON Pointer of an operation, through its path
// item's $ref when it has one.
func (l *loader) operationPointer(path, method string) string {
	return l.items[path].pointer() + "/" + strings.ToLower(method)
}

// pointerPos is where the member a JSON Pointer names is written: its key,
// or the item itself in a list; fallback when the pointer leads nowhere.
func (l *loader) pointerPos(ptr string, fallback model.Pos) model.Pos {
	i := strings.LastIndexByte(ptr, '/')
	if i < 0 {
		return fallback
	}
	parent, err := l.t.resolveLocal("#" + ptr[:i])
	if err != nil {
		return fallback
	}
	last, err := splitPointer(ptr[i:])
	if err != nil || len(last) != 1 {
		return fallback
	}
	switch parent.Kind {
	case yaml.MappingNode:
		if k, _ := get(parent, last[0]); k != nil {
			return l.t.pos(k)
		}
	case yaml.SequenceNode:
		if n, err := strconv.Atoi(last[0]); err == nil && n >= 0 && n < len(parent.Content) {
			return l.t.pos(parent.Content[n])
		}
	}
	return fallback
}
