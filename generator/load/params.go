package load

import (
	"fmt"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

// param is a parameter as the spec declares it, read from the node tree
// (for positions).
type param struct {
	name, in    string
	required    bool
	deprecated  bool
	node        *yaml.Node
	schemaType  string // "" when not known
	schemaShown string // how the type is shown in messages
	maxLength   int    // the schema's maxLength; 0 when it declares none
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
			if _, dep := get(pn, "deprecated"); dep != nil && dep.Tag == tagBool && !isFalse(dep.Value) {
				p.deprecated = true
			}
			_, schema := get(pn, "schema")
			p.schemaType, p.schemaShown = c.l.nodeSchemaType(schema)
			if _, ml := get(c.l.followRef(schema), "maxLength"); ml != nil && ml.Tag == tagInt {
				var n int64
				if err := ml.Decode(&n); err == nil && n > 0 {
					p.maxLength = int(min(n, 1<<20))
				}
			}
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

// maxRefHops bounds a chain of $refs to $refs, which may loop.
const maxRefHops = 64

// followRef follows local $refs in the node tree.
func (l *loader) followRef(n *yaml.Node) *yaml.Node {
	for range maxRefHops {
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
func (c *opCheck) checkKeyParam(params []param, ks keySource, keyPos, requiredPos model.Pos) {
	if ks.in != key.InHeader && ks.in != key.InQuery {
		return
	}
	decl := c.find(params, string(ks.in), ks.name)
	if decl == nil {
		return
	}
	what := fmt.Sprintf("%s parameter %s (line %d)", ks.in, decl.name, decl.node.Line)
	if decl.schemaType != "" && decl.schemaType != "string" {
		c.r.errorf(keyPos, "key", "the spec declares the %s as %s, but an idempotency key is a string; declare its schema as type: string",
			what, decl.schemaShown)
	}
	c.checkKeyLength(decl, what)
	c.keyDeclared(keyDecl{decl.required, decl.deprecated, what, "mark it required: true"}, keyPos, requiredPos)
}

// keyDecl is what the spec declares of the key's parameter or body
// property: whether it is required or deprecated, what it is ("header
// parameter Idempotency-Key (line 12)"), and how to mark it required.
type keyDecl struct {
	required, deprecated bool
	what, markRequired   string
}

// keyDeclared holds the policy to what the spec declares of its key.
// Without a required of the extension's own, the spec's answer is the
// policy's: a key the spec requires is required, so that a request without
// one is refused rather than run unprotected. A required that contradicts
// the spec, and a key the spec marks deprecated, draw warnings.
func (c *opCheck) keyDeclared(d keyDecl, keyPos, requiredPos model.Pos) {
	p := &c.op.Policy
	switch {
	case !c.requiredSet:
		p.Required = d.required
	case p.Required && !d.required:
		c.r.warnf(requiredPos, "required", "the policy requires a key, but the spec declares the %s optional, so clients reading the spec may not send it; %s",
			d.what, d.markRequired)
	case !p.Required && d.required:
		c.r.warnf(requiredPos, "required", "the spec declares the %s required, but the policy lets requests without a key through untouched; set required: true",
			d.what)
	}
	if d.deprecated {
		without := "runs unprotected"
		if p.Required {
			without = "is refused with 400"
		}
		c.r.warnf(keyPos, "key", "the spec marks the %s deprecated, so clients may stop sending it, and a request without a key %s; carry the key where the API means to keep it",
			d.what, without)
	}
}

// checkQuery checks the fingerprinted query parameters.
func (c *opCheck) checkQuery(params []param, ks keySource) {
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
		case ks.in == key.InQuery && it.v == ks.name:
			c.r.errorf(it.pos, "query", "%s is the idempotency key (key: query:%s), which is never part of the fingerprint; remove it", it.v, ks.name)
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

// checkKeyLength honours the maxLength the spec declares for the key's
// parameter: without a keyMaxLength of its own the policy takes it (up to
// the key.MaxLength a key may have), and a keyMaxLength that contradicts it is a
// warning, since clients read the spec and the policy is what the server
// enforces.
func (c *opCheck) checkKeyLength(decl *param, what string) {
	if decl.maxLength == 0 {
		return
	}
	n, pos := pick(c.own.keyMaxLength, c.def.keyMaxLength, 0, c.own.pos)
	switch {
	case n == 0 && decl.maxLength <= defaultKeyMaxLength:
		c.op.Policy.KeyMaxLength = decl.maxLength
	case n == 0:
		c.r.warnf(c.op.Pos, "keyMaxLength", "the spec lets the %s be %d characters long, but a key is at most %d; keys longer than that are refused with 400",
			what, decl.maxLength, defaultKeyMaxLength)
	case n != decl.maxLength:
		c.r.warnf(pos, "keyMaxLength", "%d contradicts the maxLength %d the spec declares for the %s; clients follow the spec, so make them agree",
			n, decl.maxLength, what)
	}
}
