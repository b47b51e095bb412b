package load

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/generator/model"
)

// lookupResult says what a JSON Pointer meets in a request-body schema.
type lookupResult struct {
	found bool
	typ   model.FieldType
	// maxLength, when found, is the smallest maxLength declared for the
	// value (allOf members each add theirs); 0 when none is.
	maxLength int
	// nearMiss, when found, is a declared property the last token nearly
	// spells, under a schema whose additionalProperties let the token
	// through anyway (/date_of_birthZq beside /date_of_birth); nearAt is
	// the pointer of that schema.
	nearMiss, nearAt string

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
//   - properties are followed by name; $ref is followed; the properties of
//     allOf, oneOf and anyOf members count as the schema's own;
//   - so with oneOf/anyOf a pointer is accepted when at least one branch
//     has it: a body of another branch simply lacks the field, and a
//     missing field is part of the fingerprint;
//   - a property not declared is accepted only where additionalProperties
//     says so (then its type is whatever that says);
//   - an array is one value: a pointer into its items is refused.
//
// Composition consumes no token and may loop (Query: anyOf [Term, And],
// And: allOf [Query, …]), so a schema's members are gathered once, with a
// visited set, into its composition closure; only properties move the walk
// on, one token each. Results are memoized by schema and remaining tokens,
// so the work is bounded by the number of schemas times the pointer's
// length, however the members refer to each other.
func findPointer(s *openapi3.SchemaRef, toks []string, prefix string) lookupResult {
	w := &schemaWalk{
		closures: map[*openapi3.Schema][]*openapi3.Schema{},
		memo:     map[walkKey]lookupResult{},
		toks:     toks,
	}
	return w.find(s, 0, prefix)
}

// schemaWalk is one findPointer's state.
type schemaWalk struct {
	closures map[*openapi3.Schema][]*openapi3.Schema
	memo     map[walkKey]lookupResult
	toks     []string
}

type walkKey struct {
	s    *openapi3.Schema
	done int // tokens consumed
}

// closure returns v and every schema its allOf, oneOf and anyOf members
// reach through further members, each once, in a fixed order.
func (w *schemaWalk) closure(v *openapi3.Schema) []*openapi3.Schema {
	if c, ok := w.closures[v]; ok {
		return c
	}
	c := compositionClosure(v)
	w.closures[v] = c
	return c
}

func compositionClosure(v *openapi3.Schema) []*openapi3.Schema {
	seen := map[*openapi3.Schema]bool{v: true}
	out := []*openapi3.Schema{v}
	for i := 0; i < len(out); i++ {
		for _, group := range []openapi3.SchemaRefs{out[i].AllOf, out[i].OneOf, out[i].AnyOf} {
			for _, m := range group {
				if m == nil || m.Value == nil || seen[m.Value] {
					continue
				}
				seen[m.Value] = true
				out = append(out, m.Value)
			}
		}
	}
	return out
}

func (w *schemaWalk) find(s *openapi3.SchemaRef, done int, prefix string) lookupResult {
	if s == nil || s.Value == nil {
		if done == len(w.toks) {
			return lookupResult{found: true, typ: model.TypeAny, brokenRef: -1}
		}
		return lookupResult{at: prefix, brokenRef: -1}
	}
	key := walkKey{s.Value, done}
	if r, ok := w.memo[key]; ok {
		return r
	}
	r := w.findIn(s.Value, done, prefix)
	w.memo[key] = r
	return r
}

func (w *schemaWalk) findIn(v *openapi3.Schema, done int, prefix string) lookupResult {
	res := lookupResult{at: prefix, brokenRef: -1}
	members := w.closure(v)
	for _, m := range members {
		if idx, ok := brokenRefIndex(m.Extensions); ok {
			res.brokenRef = idx
			return res
		}
	}
	if done == len(w.toks) {
		return lookupResult{found: true, typ: schemaType(v), maxLength: composedMaxLength(v, declaredMaxLength), brokenRef: -1}
	}

	tok := w.toks[done]
	next := prefix + "/" + escapeTokens([]string{tok})[0]
	var candidates []lookupResult
	open := false
	limits := make(map[*openapi3.Schema]int) // each member's maxLength for the token's value
	for _, m := range members {
		var c lookupResult
		if p, ok := m.Properties[tok]; ok {
			c = w.find(p, done+1, next)
		} else if ap := m.AdditionalProperties; ap.Schema != nil {
			c = w.find(ap.Schema, done+1, next)
		} else {
			open = open || (ap.Has != nil && *ap.Has)
			continue
		}
		candidates = append(candidates, c)
		if c.found {
			limits[m] = c.maxLength
		}
	}
	if open {
		// Anything goes below this point; nothing more can be checked.
		r := lookupResult{found: true, typ: model.TypeAny, brokenRef: -1}
		if done+1 == len(w.toks) {
			if s := suggest(tok, propertyNames(v)); s != "" && s != tok {
				r.nearMiss, r.nearAt = s, prefix
			}
		}
		candidates = append(candidates, r)
	}

	var found []lookupResult
	for _, c := range candidates {
		if c.found {
			found = append(found, c)
		}
	}
	if len(found) > 0 {
		r := found[0]
		if len(found) > 1 {
			// Another member declares the token (or leads to it): it is
			// no near miss.
			r.nearMiss, r.nearAt = "", ""
		}
		r.maxLength = composedMaxLength(v, func(m *openapi3.Schema) int { return limits[m] })
		for _, f := range found[1:] {
			switch {
			case r.typ == model.TypeAny:
				r.typ = f.typ
			case f.typ != model.TypeAny && f.typ != r.typ:
				// Branches disagree: canonicalize the value as it comes.
				return lookupResult{found: true, typ: model.TypeAny, brokenRef: -1}
			}
		}
		return r
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
	if slices.ContainsFunc(members, isArray) {
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
		best.names = propertyNames(v)
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

// propertyNames lists the property names declared by v and its allOf,
// oneOf and anyOf members, sorted.
func propertyNames(v *openapi3.Schema) []string {
	var names []string
	for _, m := range compositionClosure(v) {
		for name := range m.Properties {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// schemaType is the fingerprint type of a schema: its declared type with
// "null" set aside, or what its shape and members imply. A oneOf or anyOf
// member that admits only null does not count ([integer, null] is a
// nullable integer). Members already being looked at count as "any", so
// a schema that contains itself ends the walk; each schema is typed once,
// however many members share it, so schemas that name one another through
// several paths cost no more than their number.
func schemaType(v *openapi3.Schema) model.FieldType {
	return newSchemaFold(model.TypeAny, typeIn).of(v)
}

// schemaFold computes a value of each schema from its members' values,
// once per schema however many paths reach it. A nil schema, or one met
// again while its own value is being computed (a schema that contains
// itself), has the value cyclic.
type schemaFold[T any] struct {
	cyclic   T
	compute  func(f *schemaFold[T], v *openapi3.Schema) T
	visiting map[*openapi3.Schema]bool
	done     map[*openapi3.Schema]T
}

func newSchemaFold[T any](cyclic T, compute func(f *schemaFold[T], v *openapi3.Schema) T) *schemaFold[T] {
	return &schemaFold[T]{cyclic: cyclic, compute: compute,
		visiting: map[*openapi3.Schema]bool{}, done: map[*openapi3.Schema]T{}}
}

// of is v's value.
func (f *schemaFold[T]) of(v *openapi3.Schema) T {
	if v == nil || f.visiting[v] {
		return f.cyclic
	}
	if x, ok := f.done[v]; ok {
		return x
	}
	f.visiting[v] = true
	x := f.compute(f, v)
	delete(f.visiting, v)
	f.done[v] = x
	return x
}

func typeIn(t *schemaFold[model.FieldType], v *openapi3.Schema) model.FieldType {
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
		if m == nil {
			continue
		}
		if typ := t.of(m.Value); typ != model.TypeAny {
			return typ
		}
	}
	for _, group := range []openapi3.SchemaRefs{v.OneOf, v.AnyOf} {
		var types []model.FieldType
		for _, m := range group {
			if m == nil || m.Value == nil || onlyNull(m.Value) {
				continue
			}
			types = append(types, t.of(m.Value))
		}
		if len(types) == 0 {
			continue
		}
		for _, other := range types[1:] {
			if other != types[0] {
				return model.TypeAny
			}
		}
		return types[0]
	}
	switch {
	case len(v.Properties) > 0 || v.AdditionalProperties.Schema != nil:
		return model.TypeObject
	case v.Items != nil:
		return model.TypeArray
	}
	return model.TypeAny
}

// onlyNull reports whether a schema admits null alone: {type: "null"} in
// OpenAPI 3.1, or {enum: [null]}.
func onlyNull(v *openapi3.Schema) bool {
	if v.Type != nil {
		ts := v.Type.Slice()
		return len(ts) == 1 && ts[0] == openapi3.TypeNull
	}
	return len(v.Enum) == 1 && v.Enum[0] == nil
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

// declaredMaxLength is the maxLength v itself declares, capped at 1 MiB; 0
// when it declares none.
func declaredMaxLength(v *openapi3.Schema) int {
	if v.MaxLength == nil || *v.MaxLength == 0 {
		return 0
	}
	return int(min(*v.MaxLength, 1<<20))
}

// composedMaxLength is the longest value v allows, given the limit own(m)
// that each schema m of v's composition sets by itself (0: none). v and
// every allOf member apply together, so the tightest counts; of a oneOf
// or anyOf group one member is enough, so the loosest counts, and a
// member without a limit lifts it. The policy then never refuses a key
// the spec allows. A member that leads back to one being combined adds
// nothing; each schema is combined once, however many members share it.
func composedMaxLength(v *openapi3.Schema, own func(*openapi3.Schema) int) int {
	return newSchemaFold(0, func(c *schemaFold[int], v *openapi3.Schema) int {
		return limitIn(c, v, own)
	}).of(v)
}

func limitIn(c *schemaFold[int], v *openapi3.Schema, own func(*openapi3.Schema) int) int {
	n := own(v)
	for _, m := range v.AllOf {
		if m != nil {
			n = tighter(n, c.of(m.Value))
		}
	}
	for _, group := range []openapi3.SchemaRefs{v.OneOf, v.AnyOf} {
		if len(group) == 0 {
			continue
		}
		loose := -1
		for _, m := range group {
			l := 0
			if m != nil {
				l = c.of(m.Value)
			}
			loose = looser(loose, l)
		}
		n = tighter(n, loose)
	}
	return n
}

// looser is the larger of two length limits, 0 meaning no limit and -1
// none seen yet.
func looser(a, b int) int {
	switch {
	case a < 0:
		return b
	case a == 0 || b == 0:
		return 0
	}
	return max(a, b)
}

// tighter is the smaller of two length limits, 0 meaning no limit.
func tighter(a, b int) int {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}
