package load

import (
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/generator/model"
)

// useBrokenRef reports a broken $ref the generator needed.
func (c *opCheck) useBrokenRef(idx int, field, need string) {
	ref := &c.l.t.refs[idx]
	ref.used = true
	c.r.errorf(ref.pos, field, "$ref %q %s; %s", ref.ref, ref.reason, need)
}

// checkBody picks the body media type and checks the fingerprint and a
// body key against the request-body schema.
func (c *opCheck) checkBody(key keySource, keyPos, requiredPos model.Pos) {
	fp, fpPos := pick(c.own.fingerprint, c.def.fingerprint, nil, c.own.pos)
	bodyKey := key.in == model.KeyInBody
	needSchema := len(fp) > 0 || bodyKey
	field := "fingerprint"
	if len(fp) == 0 {
		field = "key"
	}

	var body *openapi3.RequestBody
	if c.kinOp != nil && c.kinOp.RequestBody != nil {
		body = c.kinOp.RequestBody.Value
	}
	if body != nil {
		if idx, ok := brokenRefIndex(body.Extensions); ok {
			if needSchema {
				c.useBrokenRef(idx, field, "the "+field+" needs the request body it points at")
			}
			return
		}
	}
	if body == nil || len(body.Content) == 0 {
		if len(fp) > 0 {
			c.r.errorf(fpPos, "fingerprint", "the operation declares no request body, so there are no body fields to fingerprint; remove fingerprint (path parameters are always fingerprinted)")
		}
		if bodyKey {
			c.r.errorf(keyPos, "key", "the operation declares no request body to carry the key %s", key.name)
		}
		return
	}

	mts := c.bodyMediaTypes(body.Content)
	if len(mts) == 0 {
		return // every content key was refused above
	}
	var chosen string
	for _, want := range []func(string) bool{isJSONMediaType, func(mt string) bool { return mt == formMediaType }} {
		var names []string
		for mt := range mts {
			if want(mt) {
				names = append(names, mt)
			}
		}
		if len(names) > 0 {
			slices.Sort(names)
			// application/json itself before any +json type.
			chosen = names[0]
			if slices.Contains(names, "application/json") {
				chosen = "application/json"
			}
			break
		}
	}
	if chosen == "" {
		var names []string
		for mt := range mts {
			names = append(names, mt)
		}
		slices.Sort(names)
		list := strings.Join(names, ", ")
		if needSchema {
			c.r.errorf(fpPos, field, "the request body is %s only; idemgen reads fields from application/json and %s bodies alone", list, formMediaType)
		} else {
			c.r.warnf(c.op.Pos, "", "the request body is %s only, which idemgen cannot canonicalize (it reads application/json and %s): a request that carries such a body fails fingerprinting at run time. Annotate the operation only if clients send it without a body",
				list, formMediaType)
		}
		return
	}
	if mt, mtPos := pick(c.own.mediaType, c.def.mediaType, "", c.own.pos); mt != "" {
		if _, declared := mts[mt]; !declared {
			c.r.errorf(mtPos, "mediaType", "the request body does not declare %s (it declares %s)", mt, strings.Join(sortedKeys(mts), ", "))
			return
		}
		chosen = mt
	} else if c.own.rejected["mediaType"] || c.def.rejected["mediaType"] {
		return // the refused mediaType was reported; it meant to settle this
	} else if others := otherKinds(mts, chosen); len(others) > 0 {
		// The runtime reads one kind of body per operation and answers a
		// keyed request of any other kind with 415: pinning one silently
		// would turn away every client that sends the other.
		c.r.errorf(c.op.Pos, "", "the request body is declared as %s and also as %s, but the policy fingerprints one kind of body: a request of the other kind that carries a key would be refused with 415 before the handler runs. Set mediaType: %s to protect those bodies alone, knowingly, or declare one kind",
			chosen, strings.Join(others, ", "), chosen)
		return
	}
	if isJSONMediaType(chosen) {
		c.op.BodyMediaType = "application/json"
	} else {
		c.op.BodyMediaType = formMediaType
	}
	schema := mts[chosen].Schema
	if needSchema && schema == nil {
		c.r.errorf(fpPos, field, "the %s request body declares no schema, so its fields cannot be checked; declare one", chosen)
		return
	}

	for _, it := range fp {
		if bodyKey && it.v == key.name {
			c.r.errorf(it.pos, "fingerprint", "%s is the idempotency key (key: body:%s), which is never part of the fingerprint; remove it", it.v, key.name)
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

	if bodyKey {
		res := c.l.facts.lookup(schema, key.name)
		switch {
		case res.found && res.typ != model.TypeString && res.typ != model.TypeAny:
			c.r.errorf(keyPos, "key", "the request body schema declares %s as %s, but an idempotency key is a string", key.name, res.typ)
		case res.found:
			c.checkKeyLength(&param{maxLength: res.maxLength}, "body field "+key.name)
			required, deprecated := bodyKeyDecl(body, schema, key.name)
			c.keyDeclared(keyDecl{required, deprecated, "body field " + key.name, "list it in the required of its object (and mark the request body required)"}, keyPos, requiredPos)
		case res.brokenRef >= 0:
			c.useBrokenRef(res.brokenRef, "key", "the key "+key.name+" needs the schema it points at")
		default:
			c.r.errorf(keyPos, "key", "%s", missingMessage(key.name, "the key "+key.name, res))
		}
	}
}

// mediaObjectFields are the fields of an OpenAPI Media Type Object: one of
// them among the media types of a content map was meant to sit one level
// deeper.
var mediaObjectFields = []string{"schema", "example", "examples", "encoding", "itemSchema", "prefixEncoding", "itemEncoding"}

// bodyMediaTypes returns the request body's media types (see mediaTypes),
// less the content keys that are not media types: a spec error, reported
// at the key's own line. It is most often a field mis-indented into
// content (examples: {} one level too far out), which would otherwise read
// as a second kind of body and be blamed on the policy.
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
		c.r.errorf(c.l.t.pos(p.key), "", "content key %q is not a media type (mis-indented?): %s", p.key.Value, hint)
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
