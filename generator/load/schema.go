package load

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/generator/model"
)

// maxSchemaDepth bounds the walk through allOf/oneOf/anyOf, which consumes
// no pointer token and could otherwise follow a recursive schema forever.
const maxSchemaDepth = 64

// lookupResult says what a JSON Pointer meets in a request-body schema.
type lookupResult struct {
	found bool
	typ   model.FieldType

	// When not found: the pointer prefix that exists, and the property
	// names declared there (for "did you mean").
	at    string
	names []string
	// intoArray is set when the pointer goes into an array's items; array
	// is then the pointer of the array ("" for a body that is an array).
	intoArray bool
	array     string
	// brokenRef is the index in tree.refs of a $ref the walk had to follow
	// but could not, or -1.
	brokenRef int
}

// findPointer walks toks through s. The rules (see the package doc):
//
//   - properties are followed by name; $ref is followed; an allOf member's
//     properties count as the schema's own;
//   - with oneOf/anyOf a pointer is accepted when at least one branch has
//     it: a body of another branch simply lacks the field, and a missing
//     field is part of the fingerprint;
//   - a property not declared is accepted only where additionalProperties
//     says so (then its type is whatever that says);
//   - an array is one value: a pointer into its items is refused.
func findPointer(s *openapi3.SchemaRef, toks []string, prefix string) lookupResult {
	return findIn(s, toks, prefix, 0)
}

func findIn(s *openapi3.SchemaRef, toks []string, prefix string, depth int) lookupResult {
	res := lookupResult{at: prefix, brokenRef: -1}
	if s == nil || s.Value == nil {
		if len(toks) == 0 {
			return lookupResult{found: true, typ: model.TypeAny, brokenRef: -1}
		}
		return res
	}
	v := s.Value
	if idx, ok := brokenRefIndex(v.Extensions); ok {
		res.brokenRef = idx
		return res
	}
	if len(toks) == 0 {
		return lookupResult{found: true, typ: schemaType(s, 0), brokenRef: -1}
	}
	if depth > maxSchemaDepth {
		return res
	}

	tok := toks[0]
	next := prefix + "/" + escapeTokens([]string{tok})[0]
	var candidates []lookupResult
	if p, ok := v.Properties[tok]; ok {
		candidates = append(candidates, findIn(p, toks[1:], next, depth+1))
	} else if ap := v.AdditionalProperties; ap.Schema != nil {
		candidates = append(candidates, findIn(ap.Schema, toks[1:], next, depth+1))
	} else if ap.Has != nil && *ap.Has {
		// Anything goes below this point; nothing more can be checked.
		candidates = append(candidates, lookupResult{found: true, typ: model.TypeAny, brokenRef: -1})
	}
	for _, group := range []openapi3.SchemaRefs{v.AllOf, v.OneOf, v.AnyOf} {
		for _, b := range group {
			candidates = append(candidates, findIn(b, toks, prefix, depth+1))
		}
	}

	var found []lookupResult
	for _, c := range candidates {
		if c.found {
			found = append(found, c)
		}
	}
	if len(found) > 0 {
		typ := found[0].typ
		for _, f := range found[1:] {
			switch {
			case typ == model.TypeAny:
				typ = f.typ
			case f.typ != model.TypeAny && f.typ != typ:
				// Branches disagree: canonicalize the value as it comes.
				return lookupResult{found: true, typ: model.TypeAny, brokenRef: -1}
			}
		}
		return lookupResult{found: true, typ: typ, brokenRef: -1}
	}

	// Not found: report the most telling reason.
	for _, c := range candidates {
		if c.brokenRef >= 0 {
			return c
		}
	}
	for _, c := range candidates {
		if c.intoArray {
			return c
		}
	}
	if isArray(v) {
		res.intoArray, res.array = true, prefix
		return res
	}
	// The deepest prefix reached names the property that is missing.
	best := res
	for _, c := range candidates {
		if len(c.at) > len(best.at) {
			best = c
		}
	}
	if best.at == prefix {
		best.names = propertyNames(s, 0)
	}
	return best
}

func brokenRefIndex(ext map[string]any) (int, bool) {
	raw, ok := ext[unresolvedRefKey]
	if !ok {
		return 0, false
	}
	s, _ := raw.(string)
	idx, err := strconv.Atoi(s)
	if err != nil {
		return 0, false
	}
	return idx, true
}

func isArray(v *openapi3.Schema) bool {
	return (v.Type != nil && v.Type.Includes(openapi3.TypeArray)) || v.Items != nil
}

// propertyNames lists the property names declared by s and its allOf,
// oneOf and anyOf members, sorted.
func propertyNames(s *openapi3.SchemaRef, depth int) []string {
	if s == nil || s.Value == nil || depth > maxSchemaDepth {
		return nil
	}
	var names []string
	for name := range s.Value.Properties {
		names = append(names, name)
	}
	for _, group := range []openapi3.SchemaRefs{s.Value.AllOf, s.Value.OneOf, s.Value.AnyOf} {
		for _, b := range group {
			names = append(names, propertyNames(b, depth+1)...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// schemaType is the fingerprint type of a schema: its declared type with
// "null" set aside, or what its shape and members imply.
func schemaType(s *openapi3.SchemaRef, depth int) model.FieldType {
	if s == nil || s.Value == nil || depth > maxSchemaDepth {
		return model.TypeAny
	}
	v := s.Value
	if v.Type != nil {
		var types []string
		for _, t := range v.Type.Slice() {
			if t != openapi3.TypeNull {
				types = append(types, t)
			}
		}
		if len(types) == 1 {
			return fieldType(types[0])
		}
		if len(types) > 1 {
			return model.TypeAny
		}
	}
	for _, m := range v.AllOf {
		if t := schemaType(m, depth+1); t != model.TypeAny {
			return t
		}
	}
	for _, group := range []openapi3.SchemaRefs{v.OneOf, v.AnyOf} {
		if len(group) == 0 {
			continue
		}
		t := schemaType(group[0], depth+1)
		for _, m := range group[1:] {
			if schemaType(m, depth+1) != t {
				return model.TypeAny
			}
		}
		return t
	}
	switch {
	case len(v.Properties) > 0 || v.AdditionalProperties.Schema != nil:
		return model.TypeObject
	case v.Items != nil:
		return model.TypeArray
	}
	return model.TypeAny
}

func fieldType(t string) model.FieldType {
	switch t {
	case openapi3.TypeString:
		return model.TypeString
	case openapi3.TypeNumber:
		return model.TypeNumber
	case openapi3.TypeInteger:
		return model.TypeInteger
	case openapi3.TypeBoolean:
		return model.TypeBoolean
	case openapi3.TypeObject:
		return model.TypeObject
	case openapi3.TypeArray:
		return model.TypeArray
	}
	return model.TypeAny
}

// missingMessage explains a pointer the schema does not have; what names
// the pointer ("/amount", "the key /idempotency_key").
func missingMessage(pointer, what string, r lookupResult) string {
	if r.intoArray {
		return fmt.Sprintf("%s points into the array %s, which is fingerprinted as one whole value; list %s instead", what, arrayName(r.array), arrayName(r.array))
	}
	rest := strings.TrimPrefix(pointer, r.at+"/")
	missing, _, _ := strings.Cut(rest, "/")
	name := strings.ReplaceAll(strings.ReplaceAll(missing, "~1", "/"), "~0", "~")
	msg := what + " is not in the request body schema"
	if r.at != "" {
		msg += fmt.Sprintf(": %s has no property %q", r.at, name)
	}
	switch s := suggest(name, r.names); {
	case s != "":
		msg += fmt.Sprintf(" (did you mean %s/%s?)", r.at, escapeTokens([]string{s})[0])
	case len(r.names) > 0 && len(r.names) <= 12:
		msg += " (properties there: " + strings.Join(r.names, ", ") + ")"
	case len(r.names) == 0:
		msg += " (no properties are declared there)"
	}
	return msg
}

func arrayName(p string) string {
	if p == "" {
		return "(the whole body)"
	}
	return p
}
