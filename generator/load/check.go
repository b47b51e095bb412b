package load

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
)

// opCheck resolves and checks the policy of one annotated operation.
type opCheck struct {
	l        *loader
	r        reporter
	op       *model.Operation
	kinOp    *openapi3.Operation
	opNode   *yaml.Node
	itemNode *yaml.Node
	own, def *layer
}

// fmtDuration writes a duration the way the extension spells it (7d, 1h30m).
func fmtDuration(d time.Duration) string {
	var b strings.Builder
	for _, u := range []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.s)
			d -= n * u.d
		}
	}
	if b.Len() == 0 {
		return d.String()
	}
	return b.String()
}

// resolve merges the operation's overrides over the document's defaults
// over the built-in defaults, then checks the result against the operation.
func (c *opCheck) resolve() {
	own, def, at := c.own, c.def, c.own.pos
	p := &c.op.Policy

	p.Scope, _ = pick(own.scope, def.scope, defaultScope, at)
	key, keyPos := pick(own.key, def.key, keySource{model.KeyInHeader, defaultKeyHeader}, at)
	p.KeyIn, p.KeyName = key.in, key.name
	p.KeyMaxLength, _ = pick(own.keyMaxLength, def.keyMaxLength, defaultKeyMaxLength, at)
	var requiredPos model.Pos
	p.Required, requiredPos = pick(own.required, def.required, false, at)
	var ttlPos, leasePos model.Pos
	p.TTL, ttlPos = pick(own.ttl, def.ttl, defaultTTL, at)
	p.Lease, leasePos = pick(own.lease, def.lease, defaultLease, at)
	p.ClientRetryBudget, _ = pick(own.clientRetryBudget, def.clientRetryBudget, 0, at)
	p.MaxSnapshotBytes, _ = pick(own.maxSnapshotBytes, def.maxSnapshotBytes, defaultMaxSnapshotBytes, at)
	replay, _ := pick(own.replayHeaders, def.replayHeaders, nil, at)
	for _, h := range replay {
		p.ReplayHeaders = append(p.ReplayHeaders, h.v)
	}
	slices.Sort(p.ReplayHeaders)
	p.CacheServerErrors, _ = pick(own.cacheServerErrors, def.cacheServerErrors, false, at)
	p.Transactional, _ = pick(own.transactional, def.transactional, false, at)
	onExpiryDefault := "fail-closed"
	if p.Transactional {
		onExpiryDefault = "takeover"
	}
	onExpiry, onExpiryPos := pick(own.onLeaseExpiry, def.onLeaseExpiry, onExpiryDefault, at)
	p.OnLeaseExpiry = onExpiry

	// Conflicts among the document's own defaults were reported once by
	// checkDefaults; here only those the operation takes part in.
	if (own.ttl.ok || own.lease.ok) && p.Lease >= p.TTL {
		pos, field := leasePos, "lease"
		if !own.lease.ok {
			pos, field = ttlPos, "ttl"
		}
		c.r.errorf(pos, field, "lease %s must be shorter than ttl %s", fmtDuration(p.Lease), fmtDuration(p.TTL))
	}
	if (own.ttl.ok || own.clientRetryBudget.ok) && p.ClientRetryBudget > 0 && p.TTL < p.ClientRetryBudget {
		c.r.errorf(ttlPos, "ttl", "ttl %s is shorter than clientRetryBudget %s: a client still retrying would meet a forgotten key and run the request again",
			fmtDuration(p.TTL), fmtDuration(p.ClientRetryBudget))
	}
	if p.OnLeaseExpiry == "takeover" && !p.Transactional && (own.onLeaseExpiry.ok || def.onLeaseExpiry.ok) {
		c.r.warnf(onExpiryPos, "onLeaseExpiry", "takeover without transactional: a retry that takes over an abandoned claim runs the handler again, so any effect the first attempt already made happens twice")
	}

	c.recordAlias()

	params := c.parameters()
	c.checkKeyParam(params, key, keyPos, requiredPos)
	c.checkQuery(params, key)
	c.checkBody(key, keyPos)
	c.checkResponses()
	c.validate()
}

// param is a parameter as the spec declares it, read from the node tree
// (for positions).
type param struct {
	name, in    string
	required    bool
	node        *yaml.Node
	schemaType  string // "" when not known
	schemaShown string // how the type is shown in messages
}

// parameters returns the parameters of the operation and its path item;
// the operation's replace the path item's of the same name and location.
func (c *opCheck) parameters() []param {
	var out []param
	add := func(n *yaml.Node, override bool) {
		_, list := get(n, "parameters")
		if list == nil || list.Kind != yaml.SequenceNode {
			return
		}
		for _, pn := range list.Content {
			pn = c.l.followRef(deref(pn))
			_, name := get(pn, "name")
			_, in := get(pn, "in")
			if name == nil || in == nil {
				continue
			}
			p := param{name: name.Value, in: in.Value, node: pn}
			if _, req := get(pn, "required"); req != nil && req.Tag == tagBool && !isFalse(req.Value) {
				p.required = true
			}
			_, schema := get(pn, "schema")
			p.schemaType, p.schemaShown = c.l.nodeSchemaType(schema)
			i := slices.IndexFunc(out, func(q param) bool {
				return q.in == p.in && (q.name == p.name || p.in == "header" && strings.EqualFold(q.name, p.name))
			})
			switch {
			case i < 0:
				out = append(out, p)
			case override:
				out[i] = p
			}
		}
	}
	add(c.itemNode, false)
	add(c.opNode, true)
	return out
}

// followRef follows local $refs in the node tree.
func (l *loader) followRef(n *yaml.Node) *yaml.Node {
	for range maxSchemaDepth {
		_, ref := get(n, "$ref")
		if ref == nil || ref.Kind != yaml.ScalarNode {
			return n
		}
		target, err := l.t.resolveLocal(ref.Value)
		if err != nil {
			return n
		}
		n = target
	}
	return n
}

// nodeSchemaType reads the type a parameter schema declares, "" if none.
func (l *loader) nodeSchemaType(schema *yaml.Node) (typ, shown string) {
	schema = l.followRef(schema)
	_, t := get(schema, "type")
	if t == nil {
		return "", ""
	}
	switch t.Kind {
	case yaml.ScalarNode:
		return t.Value, t.Value
	case yaml.SequenceNode:
		var types []string
		for _, c := range t.Content {
			if c.Value != "null" {
				types = append(types, c.Value)
			}
		}
		if len(types) == 1 {
			return types[0], types[0]
		}
		return "multiple", strings.Join(types, " or ")
	}
	return "", ""
}

func (c *opCheck) find(params []param, in, name string) *param {
	for i, p := range params {
		if p.in == in && (p.name == name || in == "header" && strings.EqualFold(p.name, name)) {
			return &params[i]
		}
	}
	return nil
}

// checkKeyParam checks that a header or query key the spec also declares
// as a parameter agrees with the policy.
func (c *opCheck) checkKeyParam(params []param, key keySource, keyPos, requiredPos model.Pos) {
	if key.in != model.KeyInHeader && key.in != model.KeyInQuery {
		return
	}
	decl := c.find(params, string(key.in), key.name)
	if decl == nil {
		return
	}
	what := fmt.Sprintf("%s parameter %s (line %d)", key.in, decl.name, decl.node.Line)
	if decl.schemaType != "" && decl.schemaType != "string" {
		c.r.errorf(keyPos, "key", "the spec declares the %s as %s, but an idempotency key is a string; declare its schema as type: string",
			what, decl.schemaShown)
	}
	switch p := c.op.Policy; {
	case p.Required && !decl.required:
		c.r.warnf(requiredPos, "required", "the policy requires a key, but the spec declares the %s optional, so clients reading the spec may not send it; mark it required: true",
			what)
	case !p.Required && decl.required:
		c.r.warnf(requiredPos, "required", "the spec declares the %s required, but the policy lets requests without a key through untouched; set required: true",
			what)
	}
}

// checkQuery checks the fingerprinted query parameters.
func (c *opCheck) checkQuery(params []param, key keySource) {
	items, _ := pick(c.own.query, c.def.query, nil, c.own.pos)
	var declared []string
	for _, p := range params {
		if p.in == "query" {
			declared = append(declared, p.name)
		}
	}
	slices.Sort(declared)
	for _, it := range items {
		switch {
		case key.in == model.KeyInQuery && it.v == key.name:
			c.r.errorf(it.pos, "query", "%s is the idempotency key (key: query:%s), which is never part of the fingerprint; remove it", it.v, key.name)
		case !slices.Contains(declared, it.v):
			msg := fmt.Sprintf("%s is not a query parameter of this operation", it.v)
			if s := suggest(it.v, declared); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			} else if len(declared) > 0 {
				msg += " (it declares " + strings.Join(declared, ", ") + ")"
			} else {
				msg += " (it declares none)"
			}
			c.r.errorf(it.pos, "query", "%s", msg)
		default:
			c.op.Policy.Query = append(c.op.Policy.Query, it.v)
		}
	}
	slices.Sort(c.op.Policy.Query)
}

// useBrokenRef reports a broken $ref the generator needed.
func (c *opCheck) useBrokenRef(idx int, field, need string) {
	ref := &c.l.t.refs[idx]
	ref.used = true
	c.r.errorf(ref.pos, field, "$ref %q %s; %s", ref.ref, ref.reason, need)
}

// checkBody picks the body media type and checks the fingerprint and a
// body key against the request-body schema.
func (c *opCheck) checkBody(key keySource, keyPos model.Pos) {
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

	mts := mediaTypes(body.Content)
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
		toks, _ := splitPointer(it.v)
		res := findPointer(schema, toks, "")
		switch {
		case res.found:
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
		toks, _ := splitPointer(key.name)
		res := findPointer(schema, toks, "")
		switch {
		case res.found && res.typ != model.TypeString && res.typ != model.TypeAny:
			c.r.errorf(keyPos, "key", "the request body schema declares %s as %s, but an idempotency key is a string", key.name, res.typ)
		case res.found:
		case res.brokenRef >= 0:
			c.useBrokenRef(res.brokenRef, "key", "the key "+key.name+" needs the schema it points at")
		default:
			c.r.errorf(keyPos, "key", "%s", missingMessage(key.name, "the key "+key.name, res))
		}
	}
}

// checkResponses warns about streamed responses, which a replay cannot
// reproduce as they were sent.
func (c *opCheck) checkResponses() {
	if c.kinOp == nil || c.kinOp.Responses == nil {
		return
	}
	var streams []string
	for _, rr := range c.kinOp.Responses.Map() {
		if rr == nil || rr.Value == nil {
			continue
		}
		for mt := range mediaTypes(rr.Value.Content) {
			if isStreaming(mt) && !slices.Contains(streams, mt) {
				streams = append(streams, mt)
			}
		}
	}
	if len(streams) == 0 {
		return
	}
	slices.Sort(streams)
	c.r.warnf(c.op.Pos, "", "responses of type %s are streamed: the response is captured whole before it is stored, a replay sends it in one piece, and one larger than maxSnapshotBytes (%d bytes) cannot be replayed",
		strings.Join(streams, ", "), c.op.Policy.MaxSnapshotBytes)
}

// validate runs kin-openapi's validation over what the generated code
// depends on: the operation's parameters and request body. Its complaints
// are warnings; faults idemgen relies on were judged above.
func (c *opCheck) validate() {
	if c.kinOp == nil {
		return
	}
	ctx := c.l.validationCtx
	for _, pr := range c.kinOp.Parameters {
		if pr == nil || pr.Value == nil {
			continue
		}
		if _, broken := brokenRefIndex(pr.Value.Extensions); broken {
			continue
		}
		if err := pr.Value.Validate(ctx); err != nil {
			c.r.warnf(c.op.Pos, "", "the spec's %s parameter %q does not validate: %s", pr.Value.In, pr.Value.Name, oneLine(err.Error()))
		}
	}
	if rb := c.kinOp.RequestBody; rb != nil && rb.Value != nil {
		if _, broken := brokenRefIndex(rb.Value.Extensions); !broken {
			if err := rb.Value.Validate(ctx); err != nil {
				c.r.warnf(c.op.Pos, "", "the spec's request body does not validate: %s", oneLine(err.Error()))
			}
		}
	}
}
