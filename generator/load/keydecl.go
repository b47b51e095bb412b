package load

import (
	"slices"

	"github.com/getkin/kin-openapi/openapi3"
)

// bodyKeyDecl reads what the request body declares of the body key at
// pointer, which the schema walk has found. The key is required when the
// body is and each property on the pointer's way is listed in its object's
// required, by the object or one of its allOf members (a oneOf or anyOf
// branch that requires it does not bind the others). It is deprecated when
// its own schema, or an allOf member of it, says deprecated: true.
func bodyKeyDecl(body *openapi3.RequestBody, s *openapi3.SchemaRef, pointer string) (required, deprecated bool) {
	toks, err := splitPointer(pointer)
	if err != nil || s == nil {
		return false, false
	}
	required = body.Required
	cur := s.Value
	for _, tok := range toks {
		var next *openapi3.Schema
		listed := false
		for _, m := range allOfMembers(cur) {
			listed = listed || slices.Contains(m.Required, tok)
			if p := m.Properties[tok]; next == nil && p != nil {
				next = p.Value
			}
		}
		if next == nil {
			return false, false // reached through additionalProperties or a branch
		}
		required = required && listed
		cur = next
	}
	for _, m := range allOfMembers(cur) {
		deprecated = deprecated || m.Deprecated
	}
	return required, deprecated
}

// allOfMembers returns v and the schemas its allOf members reach through
// further allOf members, each once: the schemas that all apply to a value
// of v.
func allOfMembers(v *openapi3.Schema) []*openapi3.Schema {
	if v == nil {
		return nil
	}
	out := []*openapi3.Schema{v}
	for i := 0; i < len(out); i++ {
		for _, m := range out[i].AllOf {
			if m != nil && m.Value != nil && !slices.Contains(out, m.Value) {
				out = append(out, m.Value)
			}
		}
	}
	return out
}
