package load

import (
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

// useBrokenRef reports a broken $ref the generator needed.
func (c *opCheck) useBrokenRef(idx int, field, need string) {
	ref := &c.l.t.refs[idx]
	ref.used = true
	c.r.errorf(ref.pos, field, "$ref %q %s; %s", ref.ref, ref.reason, need)
}

// checkBody picks the body media type and checks the fingerprint and a
// body key against the request-body schema, in that order: the fields and
// the key are looked up in the chosen media type's schema.
func (c *opCheck) checkBody(ks keySource, keyPos, requiredPos model.Pos) {
	fp, fpPos := pick(c.own.fingerprint, c.def.fingerprint, nil, c.own.pos)
	need := bodyNeed{fields: len(fp) > 0, key: ks, keyPos: keyPos, fpPos: fpPos}
	body, schema, ok := c.chooseBody(need)
	if !ok {
		return
	}
	c.checkFingerprintFields(fp, ks, schema)
	if ks.in == key.InBody {
		c.checkBodyKey(body, schema, ks, keyPos, requiredPos)
	}
}

// bodyNeed is what a policy reads from the request body: fingerprinted
// fields, a body key, or neither (the whole body is fingerprinted, with no
// schema needed).
type bodyNeed struct {
	fields        bool
	key           keySource
	keyPos, fpPos model.Pos
}

// schema reports whether the policy reads fields of the body's schema.
func (n bodyNeed) schema() bool { return n.fields || n.key.in == key.InBody }

// field is the policy field a missing schema is blamed on.
func (n bodyNeed) field() string {
	if n.fields {
		return "fingerprint"
	}
	return "key"
}

// chooseBody finds the request body, picks the media type the runtime
// will read (recorded as the operation's BodyMediaType) and returns the
// body and that media type's schema. ok is false when nothing more can be
// checked; every reason is reported.
func (c *opCheck) chooseBody(need bodyNeed) (body *openapi3.RequestBody, schema *openapi3.SchemaRef, ok bool) {
	if c.kinOp != nil && c.kinOp.RequestBody != nil {
		body = c.kinOp.RequestBody.Value
	}
	if body != nil {
		if idx, broken := brokenRefIndex(body.Extensions); broken {
			if need.schema() {
				c.useBrokenRef(idx, need.field(), "the "+need.field()+" needs the request body it points at")
			}
			return nil, nil, false
		}
	}
	if body == nil || len(body.Content) == 0 {
		if need.fields {
			c.r.errorf(need.fpPos, "fingerprint", "the operation declares no request body, so there are no body fields to fingerprint; remove fingerprint (path parameters are always fingerprinted)")
		}
		if need.key.in == key.InBody {
			c.r.errorf(need.keyPos, "key", "the operation declares no request body to carry the key %s", need.key.name)
		}
		return nil, nil, false
	}
	mts := c.bodyMediaTypes(body.Content)
	if len(mts) == 0 {
		return nil, nil, false // every content key was refused above
	}
	chosen, ok := c.chooseMediaType(mts, need)
	if !ok {
		return nil, nil, false
	}
	if isJSONMediaType(chosen) {
		c.op.BodyMediaType = "application/json"
	} else {
		c.op.BodyMediaType = formMediaType
	}
	// A media type written with nothing under it (or ~) is a nil Media
	// Type Object: one without a schema.
	if mt := mts[chosen]; mt != nil {
		schema = mt.Schema
	} else if !need.schema() {
		c.r.warnf(c.op.Pos, "", "the %s request body is null (nothing is written under its media type), so it is read as one without a schema: the whole body is fingerprinted. Declare its schema, or write {} for none", chosen)
	}
	if need.schema() && schema == nil {
		c.r.errorf(need.fpPos, need.field(), "the %s request body declares no schema, so its fields cannot be checked; declare one", chosen)
		return nil, nil, false
	}
	return body, schema, true
}

// chooseMediaType picks the one media type of mts the runtime reads: the
// policy's mediaType, else the only kind declared, JSON before a form and
// application/json itself before any +json type.
func (c *opCheck) chooseMediaType(mts map[string]*openapi3.MediaType, need bodyNeed) (string, bool) {
	chosen := readableMediaType(mts)
	if chosen == "" {
		list := strings.Join(sortedKeys(mts), ", ")
		if need.schema() {
			c.r.errorf(need.fpPos, need.field(), "the request body is %s only; idemgen reads fields from application/json and %s bodies alone", list, formMediaType)
		} else {
			c.r.warnf(c.op.Pos, "", "the request body is %s only, which idemgen cannot canonicalize (it reads application/json and %s): a request that carries such a body fails fingerprinting at run time. Annotate the operation only if clients send it without a body",
				list, formMediaType)
		}
		return "", false
	}
	if mt, mtPos := pick(c.own.mediaType, c.def.mediaType, "", c.own.pos); mt != "" {
		if _, declared := mts[mt]; !declared {
			c.r.errorf(mtPos, "mediaType", "the request body does not declare %s (it declares %s)", mt, strings.Join(sortedKeys(mts), ", "))
			return "", false
		}
		return mt, true
	}
	if c.own.rejected["mediaType"] || c.def.rejected["mediaType"] {
		return "", false // the refused mediaType was reported; it meant to settle this
	}
	if others := otherKinds(mts, chosen); len(others) > 0 {
		// The runtime reads one kind of body per operation and answers a
		// keyed request of any other kind with 415: pinning one silently
		// would turn away every client that sends the other.
		c.r.errorf(c.op.Pos, "", "the request body is declared as %s and also as %s, but the policy fingerprints one kind of body: a request of the other kind that carries a key would be refused with 415 before the handler runs. Set mediaType: %s to protect those bodies alone, knowingly, or declare one kind",
			chosen, strings.Join(others, ", "), chosen)
		return "", false
	}
	return chosen, true
}

// readableMediaType is the media type of mts the runtime would read
// without being told: a JSON type (application/json itself first) before
// a form; "" when there is neither.
func readableMediaType(mts map[string]*openapi3.MediaType) string {
	for _, want := range []func(string) bool{isJSONMediaType, func(mt string) bool { return mt == formMediaType }} {
		var names []string
		for mt := range mts {
			if want(mt) {
				names = append(names, mt)
			}
		}
		if len(names) > 0 {
			slices.Sort(names)
			if slices.Contains(names, "application/json") {
				return "application/json"
			}
			return names[0]
		}
	}
	return ""
}

// checkFingerprintFields resolves each fingerprinted field in schema and
// records it, with its type, in the policy, sorted by pointer.
func (c *opCheck) checkFingerprintFields(fp []item, ks keySource, schema *openapi3.SchemaRef) {
	for _, it := range fp {
		if ks.in == key.InBody && it.v == ks.name {
			c.r.errorf(it.pos, "fingerprint", "%s is the idempotency key (key: body:%s), which is never part of the fingerprint; remove it", it.v, ks.name)
			continue
		}
		res := c.l.facts.lookup(schema, it.v)
		switch {
		case res.found:
			if res.nearMiss != "" {
				c.r.warnf(it.pos, "fingerprint", "%s is not a declared property; additionalProperties lets it through, but did you mean %s/%s?",
					it.v, res.nearAt, escapeTokens([]string{res.nearMiss})[0])
			}
			c.op.Policy.Fingerprint = append(c.op.Policy.Fingerprint, model.Field{Pointer: it.v, Type: res.typ, Pos: it.pos})
		case res.brokenRef >= 0:
			c.useBrokenRef(res.brokenRef, "fingerprint", "the fingerprint's "+it.v+" needs the schema it points at")
		default:
			c.r.errorf(it.pos, "fingerprint", "%s", missingMessage(it.v, it.v, res))
		}
	}
	slices.SortFunc(c.op.Policy.Fingerprint, func(a, b model.Field) int { return strings.Compare(a.Pointer, b.Pointer) })
	for i, f := range c.op.Policy.Fingerprint {
		for _, g := range c.op.Policy.Fingerprint[:i] {
			if strings.HasPrefix(f.Pointer, g.Pointer+"/") {
				c.r.warnf(f.Pos, "fingerprint", "%s lies inside %s, which is already fingerprinted whole; remove it", f.Pointer, g.Pointer)
			}
		}
	}
}

// checkBodyKey checks that a body key is a string field of schema, and
// what the spec declares of it (length, required, deprecated).
func (c *opCheck) checkBodyKey(body *openapi3.RequestBody, schema *openapi3.SchemaRef, ks keySource, keyPos, requiredPos model.Pos) {
	res := c.l.facts.lookup(schema, ks.name)
	switch {
	case res.found && res.typ != model.TypeString && res.typ != model.TypeAny:
		c.r.errorf(keyPos, "key", "the request body schema declares %s as %s, but an idempotency key is a string", ks.name, res.typ)
	case res.found:
		c.checkKeyLength(&param{maxLength: res.maxLength}, "body field "+ks.name)
		required, deprecated := bodyKeyDecl(body, schema, ks.name)
		c.keyDeclared(keyDecl{required, deprecated, "body field " + ks.name, "list it in the required of its object (and mark the request body required)"}, keyPos, requiredPos)
	case res.brokenRef >= 0:
		c.useBrokenRef(res.brokenRef, "key", "the key "+ks.name+" needs the schema it points at")
	default:
		c.r.errorf(keyPos, "key", "%s", missingMessage(ks.name, "the key "+ks.name, res))
	}
}

// mediaObjectFields are the fields of an OpenAPI Media Type Object: one of
// them among the media types of a content map was meant to sit one level
// deeper.
var mediaObjectFields = []string{"schema", "example", "examples", "encoding", "itemSchema", "prefixEncoding", "itemEncoding"}

// bodyMediaTypes returns the request body's media types (see mediaTypes),
// less the content keys that are not media types, each reported at its own
// line. It is most often a field mis-indented into content (examples: {}
// one level too far out). One that carries no schema describes no body, so
// ignoring it changes nothing the policy protects: a warning, and
// generation goes on. One with a schema was meant as a body (json: where
// application/json was meant), and guessing which would change what the
// fingerprint reads: an error.
func (c *opCheck) bodyMediaTypes(content openapi3.Content) map[string]*openapi3.MediaType {
	mts := mediaTypes(content)
	_, body := get(c.opNode, "requestBody")
	_, node := get(c.l.followRef(body), "content")
	for _, p := range pairs(node) {
		if strings.Contains(p.key.Value, "/") {
			continue
		}
		hint := "a media type has a / in it, as application/json has"
		if slices.Contains(mediaObjectFields, p.key.Value) {
			hint = p.key.Value + " belongs inside a media type, beside its schema"
		}
		if k, _ := get(p.val, "schema"); k != nil {
			c.r.errorf(c.l.t.pos(p.key), "", "content key %q is not a media type (mis-indented?): %s", p.key.Value, hint)
			continue
		}
		c.r.warnf(c.l.t.pos(p.key), "", "content key %q is not a media type, and it carries no schema, so it is ignored (mis-indented?): %s", p.key.Value, hint)
	}
	for mt := range mts {
		if !strings.Contains(mt, "/") {
			delete(mts, mt)
		}
	}
	return mts
}

// mediaKind groups media types the way the runtime reads bodies: JSON (any
// +json type), forms, and everything else.
func mediaKind(mt string) int {
	switch {
	case isJSONMediaType(mt):
		return 0
	case mt == formMediaType:
		return 1
	}
	return 2
}

// otherKinds lists, sorted, the declared media types of another kind than
// chosen.
func otherKinds(mts map[string]*openapi3.MediaType, chosen string) []string {
	var out []string
	for _, mt := range sortedKeys(mts) {
		if mediaKind(mt) != mediaKind(chosen) {
			out = append(out, mt)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
