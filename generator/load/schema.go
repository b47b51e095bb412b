package load

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/internal/work"
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

// schemaFacts is what one load works out about the request-body schemas:
// their types, length limits, broken references, composition closures and
// the pointers looked up in them. Each fact of a schema is worked out once
// per load, however many operations, fields and paths reach the schema, so
// the work grows with the number of references in the spec, not with the
// number of ways to walk them.
type schemaFacts struct {
	types    *schemaFold[model.FieldType]
	limits   *schemaFold[int] // the maxLength a schema's composition declares
	broken   *schemaFold[int] // a broken $ref in the composition, or -1
	closures map[*openapi3.Schema][]*openapi3.Schema
	lookups  map[lookupKey]lookupResult
	// tokenLimits are, per pointer and tokens consumed, the maxLength the
	// next token's value has in each schema's composition.
	tokenLimits map[lookupKey]*schemaFold[int]
}

func newSchemaFacts() *schemaFacts {
	f := &schemaFacts{
		closures:    map[*openapi3.Schema][]*openapi3.Schema{},
		lookups:     map[lookupKey]lookupResult{},
		tokenLimits: map[lookupKey]*schemaFold[int]{},
	}
	f.types = newSchemaFold(model.TypeAny, typeIn)
	f.limits = newSchemaFold(0, func(c *schemaFold[int], v *openapi3.Schema) int {
		return limitIn(c, v, declaredMaxLength)
	})
	f.broken = newSchemaFold(-1, brokenIn)
	return f
}

// lookupKey names a step of a pointer lookup: the schema reached and how
// many of the pointer's tokens were consumed to reach it (no schema in the
// keys of schemaFacts.tokenLimits, which hold one fold for every schema).
type lookupKey struct {
	s       *openapi3.Schema
	pointer string
	done    int
}

// lookup walks pointer (an RFC 6901 JSON Pointer) through s. The rules
// (see the package doc):
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
// on, one token each. Results are kept by schema, pointer and tokens
// consumed for the whole load, so the work is bounded by the schemas times
// the pointers' lengths, however the members refer to each other and
// however many operations share them.
func (f *schemaFacts) lookup(s *openapi3.SchemaRef, pointer string) lookupResult {
	toks, _ := splitPointer(pointer)
	prefixes := make([]string, len(toks)+1)
	for i, tok := range escapeTokens(toks) {
		prefixes[i+1] = prefixes[i] + "/" + tok
	}
	w := &schemaWalk{f: f, pointer: pointer, toks: toks, prefixes: prefixes}
	return w.find(s, 0)
}

// schemaWalk is one pointer's lookup.
type schemaWalk struct {
	f        *schemaFacts
	pointer  string
	toks     []string
	prefixes []string // prefixes[i] is the pointer of toks[:i]
}

// closure returns v and every schema its allOf, oneOf and anyOf members
// reach through further members, each once, in a fixed order.
func (f *schemaFacts) closure(v *openapi3.Schema) []*openapi3.Schema {
	if c, ok := f.closures[v]; ok {
		return c
	}
	seen := map[*openapi3.Schema]bool{v: true}
	out := []*openapi3.Schema{v}
	for i := 0; i < len(out); i++ {
		for _, group := range []openapi3.SchemaRefs{out[i].AllOf, out[i].OneOf, out[i].AnyOf} {
			for _, m := range group {
				work.Add(1)
				if m == nil || m.Value == nil || seen[m.Value] {
					continue
				}
				seen[m.Value] = true
				out = append(out, m.Value)
			}
		}
	}
	f.closures[v] = out
	return out
}

func (w *schemaWalk) find(s *openapi3.SchemaRef, done int) lookupResult {
	work.Add(1)
	if s == nil || s.Value == nil {
		if done == len(w.toks) {
			return lookupResult{found: true, typ: model.TypeAny, brokenRef: -1}
		}
		return lookupResult{at: w.prefixes[done], brokenRef: -1}
	}
	key := lookupKey{s.Value, w.pointer, done}
	if r, ok := w.f.lookups[key]; ok {
		return r
	}
	r := w.findIn(s.Value, done)
	w.f.lookups[key] = r
	return r
}

func (w *schemaWalk) findIn(v *openapi3.Schema, done int) lookupResult {
	prefix := w.prefixes[done]
	res := lookupResult{at: prefix, brokenRef: -1}
	if idx := w.f.broken.of(v); idx >= 0 {
		res.brokenRef = idx
		return res
	}
	if done == len(w.toks) {
		return lookupResult{found: true, typ: w.f.types.of(v), maxLength: w.f.limits.of(v), brokenRef: -1}
	}

	tok := w.toks[done]
	var candidates []lookupResult
	open := false
	members := w.f.closure(v)
	for _, m := range members {
		work.Add(1)
		if c, ok := w.own(m, done); ok {
			candidates = append(candidates, c)
		} else if ap := m.AdditionalProperties; ap.Has != nil && *ap.Has {
			open = true
		}
	}
	if open {
		// Anything goes below this point; nothing more can be checked.
		r := lookupResult{found: true, typ: model.TypeAny, brokenRef: -1}
		if done+1 == len(w.toks) {
			if s := suggest(tok, w.f.propertyNames(v)); s != "" && s != tok {
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
		r.maxLength = w.tokenLimits(done).of(v)
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
		best.names = w.f.propertyNames(v)
	}
	return best
}

// own is what m by itself, without its members, says of the token after
// done: the lookup of the property it names, or of its additionalProperties
// schema; false when it declares neither.
func (w *schemaWalk) own(m *openapi3.Schema, done int) (lookupResult, bool) {
	if p, ok := m.Properties[w.toks[done]]; ok {
		return w.find(p, done+1), true
	}
	if ap := m.AdditionalProperties.Schema; ap != nil {
		return w.find(ap, done+1), true
	}
	return lookupResult{}, false
}

// tokenLimits is the fold of the longest value the token after done may
// have in a schema's composition (see limitIn), each member contributing
// the maxLength it gives the token by itself.
func (w *schemaWalk) tokenLimits(done int) *schemaFold[int] {
	key := lookupKey{pointer: w.pointer, done: done}
	if c, ok := w.f.tokenLimits[key]; ok {
		return c
	}
	own := func(m *openapi3.Schema) int {
		if c, ok := w.own(m, done); ok && c.found {
			return c.maxLength
		}
		return 0
	}
	c := newSchemaFold(0, func(c *schemaFold[int], v *openapi3.Schema) int {
		return limitIn(c, v, own)
	})
	w.f.tokenLimits[key] = c
	return c
}

// brokenIn is the broken $ref v or a schema of its composition carries,
// or -1: the first met, v's own before its members'.
func brokenIn(b *schemaFold[int], v *openapi3.Schema) int {
	if idx, ok := brokenRefIndex(v.Extensions); ok {
		return idx
	}
	for _, group := range []openapi3.SchemaRefs{v.AllOf, v.OneOf, v.AnyOf} {
		for _, m := range group {
			if m == nil {
				continue
			}
			if idx := b.of(m.Value); idx >= 0 {
				return idx
			}
		}
	}
	return -1
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
func (f *schemaFacts) propertyNames(v *openapi3.Schema) []string {
	var names []string
	for _, m := range f.closure(v) {
		for name := range m.Properties {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// schemaFold computes a value of each schema from its members' values,
// once per load however many paths reach it. A nil schema, or one met
// again while its own value is being computed (a schema that contains
// itself), has the value cyclic.
//
// A value worked out inside such a cycle can depend on where the walk
// entered the cycle, so it is kept only until the outermost of returns;
// every other value is the same whoever asks for it first, and is kept for
// the whole load. Which operation or field is looked at first never
// changes what another gets.
type schemaFold[T any] struct {
	cyclic  T
	compute func(f *schemaFold[T], v *openapi3.Schema) T
	// depth holds the schemas being computed, the outermost at 1.
	depth map[*openapi3.Schema]int
	// shallowest is the least depth the current computation met in a
	// cycle (0: it read a value kept for the current walk only).
	shallowest int
	done       map[*openapi3.Schema]T // values for the whole load
	walk       map[*openapi3.Schema]T // values for the current walk
}

func newSchemaFold[T any](cyclic T, compute func(f *schemaFold[T], v *openapi3.Schema) T) *schemaFold[T] {
	return &schemaFold[T]{cyclic: cyclic, compute: compute,
		depth: map[*openapi3.Schema]int{}, done: map[*openapi3.Schema]T{}, walk: map[*openapi3.Schema]T{}}
}

// of is v's value.
func (f *schemaFold[T]) of(v *openapi3.Schema) T {
	work.Add(1)
	if v == nil {
		return f.cyclic
	}
	if d, ok := f.depth[v]; ok {
		f.shallowest = min(f.shallowest, d)
		return f.cyclic
	}
	if x, ok := f.done[v]; ok {
		return x
	}
	if x, ok := f.walk[v]; ok {
		f.shallowest = 0
		return x
	}
	d := len(f.depth) + 1
	f.depth[v] = d
	outer := f.shallowest
	f.shallowest = d
	x := f.compute(f, v)
	delete(f.depth, v)
	if f.shallowest >= d {
		f.done[v] = x
	} else {
		f.walk[v] = x
	}
	f.shallowest = min(outer, f.shallowest)
	if d == 1 {
		clear(f.walk)
	}
	return x
}

// typeIn is the fingerprint type of a schema: its declared type with
// "null" set aside, or what its shape and members imply. A oneOf or anyOf
// member that admits only null does not count ([integer, null] is a
// nullable integer). Members already being looked at count as "any", so
// a schema that contains itself ends the walk.
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

// limitIn is the longest value v allows, given the limit own(m) that
// each schema m of v's composition sets by itself (0: none). v and every
// allOf member apply together, so the tightest counts; of a oneOf or
// anyOf group one member is enough, so the loosest counts, and a member
// without a limit lifts it. The policy then never refuses a key the spec
// allows. A member that leads back to one being combined adds nothing.
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
