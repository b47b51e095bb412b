package load

import (
	"fmt"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
)

// pathItem is where the operations of one path are written: the path
// item's own node, or the one its $refs lead to.
type pathItem struct {
	node *yaml.Node
	// at are the member names from the document's root to node:
	// "paths" and the path, or the tokens of the last $ref.
	at []string
	// ref is the last $ref, as written, or "" when the path item is
	// written under its path.
	ref string
}

// pointer is the JSON Pointer of the path item.
func (p pathItem) pointer() string {
	return "/" + strings.Join(escapeTokens(p.at), "/")
}

// pathItemSiblings are the members a path item may have beside its $ref:
// they describe it and change nothing a tool serves. Anything else beside
// a $ref (an operation, parameters, servers) is a field OpenAPI leaves
// undefined, and tools read it differently.
var pathItemSiblings = map[string]bool{"summary": true, "description": true}

// resolvePathItems finds, for every path, the path item that holds its
// operations, following a chain of $refs (a path item that is a $ref to
// one that is a $ref again, valid in OpenAPI 3.1), and leaves each path's
// $ref naming the end of its chain, since kin-openapi follows one $ref
// only. A path item that cannot be read is an error at its $ref: a chain
// that comes back to itself, a $ref into another file (idemgen reads one
// document; the operations there, their x-idempotency with them, would be
// lost), one that leads nowhere or to no object, and a $ref with an
// operation or other field beside it, which kin-openapi (so oapi-codegen)
// reads and other tools do not. Such a path is left out of the map, and
// its $ref is set aside so that kin-openapi does not follow it either.
// It runs after neutralizeRefs, which has set aside the $refs that do not
// resolve.
func (t *tree) resolvePathItems() map[string]pathItem {
	items := map[string]pathItem{}
	_, paths := get(t.root, "paths")
	for _, p := range pairs(paths) {
		item, err := t.followPathItem(p.key.Value, deref(p.val))
		if err != nil {
			t.diags = append(t.diags, model.Diagnostic{Severity: model.Error, Pos: err.pos, Message: err.msg})
			if k, v := get(p.val, "$ref"); k != nil && v.Kind == yaml.ScalarNode {
				t.setAside(k, v, err.msg)
				t.refs[len(t.refs)-1].used = true
			}
			continue
		}
		if k, v := get(p.val, "$ref"); k != nil && v.Kind == yaml.ScalarNode {
			v.Value = item.ref
		}
		items[p.key.Value] = item
	}
	return items
}

// pathItemError is why a path item cannot be read, at the $ref that
// makes it so.
type pathItemError struct {
	pos model.Pos
	msg string
}

// followPathItem follows the $refs of the path item n, written for path.
func (t *tree) followPathItem(path string, n *yaml.Node) (pathItem, *pathItemError) {
	at, last := []string{"paths", path}, ""
	seen := map[*yaml.Node]bool{}
	for {
		if n == nil || n.Kind != yaml.MappingNode {
			return pathItem{node: n, at: at, ref: last}, nil
		}
		seen[n] = true
		refKey, ref := get(n, "$ref")
		if refKey == nil {
			if k, v := get(n, unresolvedRefKey); k != nil {
				idx, _ := strconv.Atoi(v.Value)
				broken := &t.refs[idx]
				broken.used = true
				return pathItem{}, &pathItemError{broken.pos, fmt.Sprintf("the path item of %s is $ref %q, which %s; its operations, and any %s on them, cannot be read",
					path, broken.ref, broken.reason, extension)}
			}
			return pathItem{node: n, at: at, ref: last}, nil
		}
		pos := t.pos(refKey)
		for _, s := range pairs(n) {
			if name := s.key.Value; name != "$ref" && !pathItemSiblings[name] && (name == extension || !strings.HasPrefix(name, "x-")) {
				return pathItem{}, &pathItemError{t.pos(s.key), fmt.Sprintf("the path item of %s has both a $ref and its own %s; OpenAPI leaves undefined which one a tool reads (kin-openapi, and so oapi-codegen, reads the %s beside the $ref; others read the path item the $ref names), so idemgen does not guess: move %s into the path item %q, or write the path item here without the $ref",
					path, name, name, name, ref.Value)}
			}
		}
		target, err := t.resolveLocal(ref.Value)
		if err != nil {
			return pathItem{}, &pathItemError{pos, fmt.Sprintf("the path item of %s is $ref %q, which does not resolve: %v", path, ref.Value, err)}
		}
		if seen[target] {
			return pathItem{}, &pathItemError{pos, fmt.Sprintf("the path item of %s is $ref %q, which leads back to a path item the $refs before it named; a path item's $refs must end at a path item", path, ref.Value)}
		}
		if target.Kind != yaml.MappingNode {
			return pathItem{}, &pathItemError{pos, fmt.Sprintf("the path item of %s is $ref %q, which names %s, not a path item", path, ref.Value, describe(target))}
		}
		at, _ = refTokens(ref.Value) // resolveLocal has read it
		n, last = target, ref.Value
	}
}
