package load

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/internal/work"
)

// The short tags of the YAML core schema that the loader looks at.
const (
	tagStr       = "!!str"
	tagInt       = "!!int"
	tagFloat     = "!!float"
	tagBool      = "!!bool"
	tagNull      = "!!null"
	tagMerge     = "!!merge"
	tagTimestamp = "!!timestamp"
)

// unresolvedRefKey replaces a $ref that cannot be followed, so that
// kin-openapi can still load the document. Its value indexes tree.refs; a
// schema that carries it tells the schema walker that the generator was about
// to rely on a broken reference.
const unresolvedRefKey = "x-idemgen-unresolved-ref"

// tree is the spec's YAML node tree. It is parsed once and serves both
// kin-openapi (which decodes its document from it) and the loader's own
// positions: kin records positions for an extension's key only, and
// recording them at all doubles its load time.
type tree struct {
	file string
	root *yaml.Node // the document's top-level mapping
	// refs are the $refs that could not be followed, replaced in the tree
	// by unresolvedRefKey.
	refs []brokenRef
	// diags are what parsing found: keys set twice.
	diags []model.Diagnostic
	// index, while neutralizeRefs runs, holds the members of the large
	// mappings resolveLocal has looked through, by key.
	index map[*yaml.Node]map[string]*yaml.Node
}

// brokenRef is a $ref that does not resolve within the document.
type brokenRef struct {
	ref    string
	pos    model.Pos
	reason string
	// used is set once the generator needed what the ref points at; such a
	// ref has been reported as an error and gets no warning.
	used bool
}

// parseTree parses data into a node tree and prepares it for kin-openapi's
// decoder. A JSON document is read by the JSON decoder (jsontext.go), the
// rest by the YAML parser. The error is for data that is not YAML (JSON is
// YAML) at all.
func parseTree(data []byte, file string) (*tree, error) {
	if root, ok := parseJSON(data); ok {
		return prepareTree(root, file)
	}
	root, err := parseYAML(data, file)
	if err != nil {
		return nil, err
	}
	return prepareTree(root, file)
}

// parseYAML returns the top-level node of a YAML document.
func parseYAML(data []byte, file string) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not YAML or JSON: %w", file, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	return root, nil
}

// prepareTree checks that root is an object and prepares it (see prepare).
func prepareTree(root *yaml.Node, file string) (*tree, error) {
	if root.Kind == 0 || root.Kind == yaml.DocumentNode {
		return nil, fmt.Errorf("%s: the file is empty", file)
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not an OpenAPI document: the top level is not an object", file)
	}
	t := &tree{file: file, root: root}
	hasAlias := false
	if err := t.prepare(root, &hasAlias, false); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if hasAlias {
		if err := checkAliases(root); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	return t, nil
}

// prepare makes the tree read the way the JSON form of the document would:
// mapping keys are names whatever they look like (200 is the name "200"),
// and scalars that YAML alone would type (timestamps, application tags) are
// strings. It refuses what JSON cannot hold at all, and settles keys set
// twice in one mapping (see dropDuplicates); inExt says n lies inside an
// x-idempotency value.
func (t *tree) prepare(n *yaml.Node, hasAlias *bool, inExt bool) error {
	switch n.Kind {
	case yaml.AliasNode:
		*hasAlias = true
		return nil // the anchored node is prepared where it stands
	case yaml.ScalarNode:
		if n.Tag == tagTimestamp || (strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!")) {
			n.Tag = tagStr
		}
		if n.Tag == tagFloat {
			switch strings.ToLower(strings.TrimLeft(n.Value, "+-")) {
			case ".inf", ".nan":
				return fmt.Errorf("line %d: %s is not a number JSON can hold", n.Line, n.Value)
			}
		}
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind == yaml.AliasNode && k.Alias != nil && k.Alias.Kind == yaml.ScalarNode {
				// An aliased key names the anchored text, at the alias's
				// own position.
				named := *k.Alias
				named.Anchor = ""
				named.Line, named.Column = k.Line, k.Column
				n.Content[i] = &named
				k = &named
			}
			if k.Kind == yaml.ScalarNode && k.Tag != tagStr && k.Tag != tagMerge {
				if k.Tag == tagNull {
					return fmt.Errorf("line %d: a mapping key is null", k.Line)
				}
				k.Tag = tagStr
			}
		}
		t.dropDuplicates(n, inExt)
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := t.prepare(n.Content[i+1], hasAlias, inExt || n.Content[i].Value == extension); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range n.Content {
		if err := t.prepare(c, hasAlias, inExt); err != nil {
			return err
		}
	}
	return nil
}

// dropDuplicates settles the keys a mapping sets twice, which YAML
// forbids and kin-openapi refuses with a message of no position. Real specs
// carry them (JSON parsers keep the last value without a word), so outside
// x-idempotency the earlier value is dropped with a warning; inside it,
// or for x-idempotency itself, it is an error at the second key (and the
// second is dropped, so the rest still loads and is checked).
func (t *tree) dropDuplicates(n *yaml.Node, inExt bool) {
	if !hasDuplicateKey(n) {
		return
	}
	type seen struct {
		key *yaml.Node
		at  int
	}
	var first map[string]seen
	drop := map[int]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.Tag == tagMerge {
			continue
		}
		if first == nil {
			first = make(map[string]seen, len(n.Content)/2)
		}
		prev, dup := first[k.Value]
		if !dup {
			first[k.Value] = seen{k, i}
			continue
		}
		switch {
		case k.Value == extension:
			t.diags = append(t.diags, model.Diagnostic{Severity: model.Error, Pos: t.pos(k),
				Message: fmt.Sprintf("%s is set twice (first on line %d); keep one", extension, prev.key.Line)})
			drop[i] = true
		case inExt:
			t.diags = append(t.diags, model.Diagnostic{Severity: model.Error, Pos: t.pos(k), Field: extension + "." + k.Value,
				Message: fmt.Sprintf("set twice (first on line %d)", prev.key.Line)})
			drop[i] = true
		default:
			t.diags = append(t.diags, model.Diagnostic{Severity: model.Warning, Pos: t.pos(k),
				Message: fmt.Sprintf("%q is set twice (first on line %d); the later value is used", k.Value, prev.key.Line)})
			drop[prev.at] = true
			first[k.Value] = seen{k, i}
		}
	}
	if len(drop) == 0 {
		return
	}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !drop[i] {
			kept = append(kept, n.Content[i], n.Content[i+1])
		}
	}
	n.Content = kept
}

// hasDuplicateKey is the cheap test for dropDuplicates: most mappings
// are small, and comparing their keys pairwise costs less than a map.
func hasDuplicateKey(n *yaml.Node) bool {
	c := n.Content
	if len(c) > 32 {
		seen := make(map[string]bool, len(c)/2)
		for i := 0; i+1 < len(c); i += 2 {
			if seen[c[i].Value] && c[i].Tag != tagMerge {
				return true
			}
			seen[c[i].Value] = true
		}
		return false
	}
	for i := 0; i+1 < len(c); i += 2 {
		for j := i + 2; j+1 < len(c); j += 2 {
			if c[i].Value == c[j].Value && c[i].Tag != tagMerge {
				return true
			}
		}
	}
	return false
}

// A document's YAML aliases may expand it to aliasFactor times the nodes
// it holds, plus aliasAllowance nodes. kin-openapi decodes every alias as
// a copy of what it names, so aliases that name anchors holding aliases
// (a "billion laughs") make a spec of a few hundred bytes gigabytes to
// decode, while anchors used as they are meant to (a response or the
// parameters written once and named from many operations) add a part of
// the document per use.
const (
	aliasFactor    = 10
	aliasAllowance = 100_000
)

// checkAliases refuses an anchor whose value contains an alias to itself,
// since decoding it would never end, and a document that its aliases
// expand past aliasFactor times its size plus aliasAllowance nodes. Each
// node is counted once, with the expanded size of what it holds
// remembered, so the check costs the document's size however far the
// aliases expand.
func checkAliases(root *yaml.Node) error {
	// saturated stands for any size past what a document may expand to,
	// so that sums of sizes (doubling with each level of aliases) never
	// overflow.
	const saturated, onPath = 1 << 40, -1
	// size is a node's expanded size: itself, what it holds, and what its
	// aliases name, expanded; onPath while it is being counted.
	size := map[*yaml.Node]int{}
	written := 0
	var largest *yaml.Node // the anchor that expands the most
	var count func(n *yaml.Node) (int, error)
	count = func(n *yaml.Node) (int, error) {
		switch s, seen := size[n]; {
		case seen && s == onPath:
			return 0, fmt.Errorf("line %d: anchor %q contains an alias to itself", n.Line, n.Anchor)
		case seen:
			return s, nil
		}
		size[n] = onPath
		written++
		total := 1
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			s, err := count(n.Alias)
			if err != nil {
				return 0, err
			}
			if largest == nil || s > size[largest] {
				largest = n.Alias
			}
			total += s
		}
		for _, c := range n.Content {
			s, err := count(c)
			if err != nil {
				return 0, err
			}
			total = min(total+s, saturated)
		}
		size[n] = total
		return total, nil
	}
	expanded, err := count(root)
	if err != nil {
		return err
	}
	if limit := aliasFactor*written + aliasAllowance; expanded > limit {
		what := strconv.Itoa(expanded)
		if expanded == saturated {
			what = "more than " + what
		}
		return fmt.Errorf("its YAML aliases expand its %d nodes to %s, and every reader of the spec decodes them as copies (the largest, anchor %q on line %d, holds %d nodes expanded); write the shared part once and name it with a $ref instead",
			written, what, largest.Anchor, largest.Line, size[largest])
	}
	return nil
}

// pos returns the position of n in the spec file.
func (t *tree) pos(n *yaml.Node) model.Pos {
	if n == nil {
		return model.Pos{File: t.file}
	}
	return model.Pos{File: t.file, Line: n.Line, Col: n.Column}
}

// deref follows aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// pair is one key and value of a mapping.
type pair struct{ key, val *yaml.Node }

// pairs lists a mapping's members in document order, with "<<" merges
// expanded after the mapping's own keys (which take precedence over them).
func pairs(n *yaml.Node) []pair {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	out := make([]pair, 0, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Tag == tagMerge {
			merges = append(merges, deref(n.Content[i+1]))
			continue
		}
		out = append(out, pair{k, n.Content[i+1]})
	}
	for _, m := range merges {
		srcs := []*yaml.Node{m}
		if m != nil && m.Kind == yaml.SequenceNode {
			srcs = m.Content
		}
		for _, src := range srcs {
			for _, p := range pairs(src) {
				if lookup(out, p.key.Value) == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

func lookup(ps []pair, key string) *pair {
	for i := range ps {
		if ps[i].key.Value == key {
			return &ps[i]
		}
	}
	return nil
}

// get returns the key and value nodes of a mapping member, or nils.
func get(n *yaml.Node, key string) (k, v *yaml.Node) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	// The fast path: no merge keys to consider.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i].Kind == yaml.ScalarNode {
			return n.Content[i], deref(n.Content[i+1])
		}
	}
	if p := lookup(pairs(n), key); p != nil {
		return p.key, deref(p.val)
	}
	return nil, nil
}

// splitPointer splits an RFC 6901 JSON Pointer into its unescaped tokens.
func splitPointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, errors.New("a JSON Pointer starts with /")
	}
	toks := strings.Split(p[1:], "/")
	for i, tok := range toks {
		for j := 0; j < len(tok); j++ {
			if tok[j] == '~' && (j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1')) {
				return nil, errors.New("~ must be followed by 0 or 1 (~0 is ~, ~1 is /)")
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

// refTokens returns the unescaped JSON Pointer tokens of a "#/..."
// reference.
func refTokens(ref string) ([]string, error) {
	frag, err := url.PathUnescape(strings.TrimPrefix(ref, "#"))
	if err != nil {
		return nil, fmt.Errorf("bad escape in reference: %w", err)
	}
	return splitPointer(frag)
}

// resolveLocal follows a "#/..." reference within the tree.
func (t *tree) resolveLocal(ref string) (*yaml.Node, error) {
	toks, err := refTokens(ref)
	if err != nil {
		return nil, err
	}
	n := t.root
	for i, tok := range toks {
		n = deref(n)
		switch {
		case n == nil:
		case n.Kind == yaml.MappingNode:
			n = t.member(n, tok)
		case n.Kind == yaml.SequenceNode:
			idx, err := strconv.Atoi(tok)
			if err != nil || idx < 0 || idx >= len(n.Content) {
				n = nil
			} else {
				n = n.Content[idx]
			}
		default:
			n = nil
		}
		if n == nil {
			if i == 0 {
				return nil, fmt.Errorf("the document has no member %q", tok)
			}
			return nil, fmt.Errorf("%s has no member %q", "#/"+strings.Join(escapeTokens(toks[:i]), "/"), tok)
		}
	}
	return deref(n), nil
}

// indexedMembers is how many members a mapping needs before member indexes
// it: looking through a smaller one costs less than building its index.
const indexedMembers = 32

// member is the value of key in the mapping n, as get finds it. A large
// mapping is looked through once while neutralizeRefs runs: a spec's
// references mostly name members of one mapping, its schemas.
func (t *tree) member(n *yaml.Node, key string) *yaml.Node {
	if t.index == nil || len(n.Content) <= 2*indexedMembers {
		work.Add(len(n.Content) / 2)
		_, v := get(n, key)
		return v
	}
	idx, ok := t.index[n]
	if !ok {
		work.Add(len(n.Content) / 2)
		idx = make(map[string]*yaml.Node, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.ScalarNode && idx[k.Value] == nil {
				idx[k.Value] = deref(n.Content[i+1])
			}
		}
		t.index[n] = idx
	}
	work.Add(1)
	if v := idx[key]; v != nil {
		return v
	}
	_, v := get(n, key) // a member merged in with "<<"
	return v
}

func escapeTokens(toks []string) []string {
	out := make([]string, len(toks))
	for i, tok := range toks {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
	}
	return out
}

// dataKeys hold values (examples, defaults), not OpenAPI objects: a "$ref"
// member inside them is data and is not followed.
var dataKeys = map[string]bool{
	"example": true, "default": true, "enum": true,
	"const": true, "value": true, "dataValue": true, "serializedValue": true,
}

// nameMaps hold user-chosen names as keys, so a key such as "default" or
// "example" in them is a name, not a keyword.
var nameMaps = map[string]bool{
	"properties": true, "patternProperties": true, "$defs": true, "definitions": true,
	"schemas": true, "responses": true, "parameters": true, "examples": true,
	"requestBodies": true, "headers": true, "securitySchemes": true, "links": true,
	"callbacks": true, "pathItems": true, "paths": true, "content": true,
	"encoding": true, "mapping": true, "dependentSchemas": true, "variables": true,
	"webhooks": true, "scopes": true,
}

// neutralizeRefs finds every $ref the loader cannot follow — local ones
// that point nowhere, and any reference to another file, which idemgen does
// not read — and replaces it so that kin-openapi can load the rest. Whether
// such a ref is an error depends on whether the generator needs what it
// points at, which only the policy checks know.
func (t *tree) neutralizeRefs() {
	// A spec names the same schema from many places: each $ref is
	// followed once, since finding a name among a document's schemas
	// looks through them all.
	reasons := map[string]string{}
	t.index = map[*yaml.Node]map[string]*yaml.Node{}
	defer func() { t.index = nil }()
	var walk func(n *yaml.Node, names bool)
	walk = func(n *yaml.Node, names bool) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if !names {
					if strings.HasPrefix(k.Value, "x-") || dataKeys[k.Value] {
						continue
					}
					if k.Value == "$ref" && v.Kind == yaml.ScalarNode {
						reason, ok := reasons[v.Value]
						if !ok {
							reason = t.refProblem(v.Value)
							reasons[v.Value] = reason
						}
						if reason != "" {
							t.setAside(k, v, reason)
						}
						continue
					}
				}
				walk(v, !names && nameMaps[k.Value])
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, false)
			}
		}
	}
	walk(t.root, false)
}

// refProblem says why ref cannot be followed, or "" when it can.
func (t *tree) refProblem(ref string) string {
	if !strings.HasPrefix(ref, "#") {
		return "refers to another file; idemgen reads one self-contained document (bundle the spec into one file first)"
	}
	if _, err := t.resolveLocal(ref); err != nil {
		return "does not resolve: " + err.Error()
	}
	return ""
}

// setAside replaces the $ref k: v by unresolvedRefKey and records it.
func (t *tree) setAside(k, v *yaml.Node, reason string) {
	t.refs = append(t.refs, brokenRef{ref: v.Value, pos: t.pos(k), reason: reason})
	k.Value = unresolvedRefKey
	v.Value = strconv.Itoa(len(t.refs) - 1)
	v.Tag = tagStr
	v.Style = 0
}

// quotedRef finds a local reference quoted in a kin-openapi error message.
var quotedRef = regexp.MustCompile(`"(#[^"]*)"`)

// refPos returns the position of the first $ref the message names, or the
// start of the document when it names none that can be found.
func (t *tree) refPos(msg string) model.Pos {
	m := quotedRef.FindStringSubmatch(msg)
	if m == nil {
		return model.Pos{File: t.file, Line: 1, Col: 1}
	}
	var found *yaml.Node
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for i := 0; found == nil && i < len(n.Content); i++ {
			c := n.Content[i]
			if n.Kind == yaml.MappingNode && i%2 == 0 && c.Value == "$ref" && i+1 < len(n.Content) && n.Content[i+1].Value == m[1] {
				found = c
				return
			}
			walk(c)
		}
	}
	walk(t.root)
	if found == nil {
		return model.Pos{File: t.file, Line: 1, Col: 1}
	}
	return t.pos(found)
}
