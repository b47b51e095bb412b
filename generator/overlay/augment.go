package overlay

import (
	"fmt"
	"path/filepath"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
)

// AugmentOptions says how the augmented spec is written.
type AugmentOptions struct {
	// Source is the spec's path relative to the augmented spec,
	// slash-separated, for the header.
	Source string
	// Spec is the spec file's path on disk.
	Spec string
	// Out is the augmented spec's path on disk, compared with Spec's
	// directory when the spec refers to other files.
	Out string
}

// Augment writes the spec with its overlay applied: the user's document,
// every member of it kept as written and in its place, with the overlay's
// additions merged in as the Overlay specification says (objects merge,
// arrays append). Since the overlay only adds what the spec does not
// declare, nothing of the user's is replaced. It is written as YAML; a
// JSON spec comes out in block style, the same values.
//
// It is for client generators that do not apply overlays themselves.
func Augment(spec *model.Spec, opts AugmentOptions) ([]byte, error) {
	root, err := readSpec(opts.Spec)
	if err != nil {
		return nil, err
	}
	if root == nil || root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("augmented spec: %s is not an OpenAPI document", opts.Spec)
	}
	if ref := externalRef(root); ref != "" && filepath.Clean(filepath.Dir(opts.Out)) != filepath.Clean(filepath.Dir(opts.Spec)) {
		// A relative reference resolves against the document that holds
		// it, so it would point elsewhere from another directory.
		return nil, fmt.Errorf("augmented spec: the spec refers to another file (%s), so the augmented spec must be written in the spec's directory, %s", ref, filepath.Dir(opts.Spec))
	}
	// Plan first, from the spec as written, then apply: what an action
	// leaves out depends on what the user declared, not on what an earlier
	// action added.
	for _, a := range plan(spec, root) {
		node := root
		for _, name := range a.path {
			node = get(node, name)
		}
		if node == nil {
			return nil, fmt.Errorf("augmented spec: %s selects nothing", a.target())
		}
		merge(node, a.update)
	}
	block(root)
	return encode(root, opts.Source)
}

// merge merges the mapping src into the mapping dst as an Overlay update:
// a new member is appended, an object merges into an object, an array
// appends to an array, and any other value replaces the old one.
func merge(dst, src *yaml.Node) {
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		cur := get(dst, k.Value)
		switch {
		case cur == nil:
			dst.Content = append(dst.Content, k, v)
		case cur.Kind == yaml.MappingNode && v.Kind == yaml.MappingNode:
			merge(cur, v)
		case cur.Kind == yaml.SequenceNode && v.Kind == yaml.SequenceNode:
			cur.Content = append(cur.Content, v.Content...)
		default:
			*cur = *v
		}
	}
}

// block turns flow collections (a JSON spec's braces and brackets) into
// block style, so that the additions, which are block style, can sit
// inside them.
func block(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style &^= yaml.FlowStyle
	}
	for _, c := range n.Content {
		block(c)
	}
}

// externalRef returns the first $ref that points into another document,
// or "".
func externalRef(n *yaml.Node) string {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if v := n.Content[i+1]; n.Content[i].Value == "$ref" && v.Kind == yaml.ScalarNode && !strings.HasPrefix(v.Value, "#") {
				return v.Value
			}
		}
	}
	for _, c := range n.Content {
		if ref := externalRef(c); ref != "" {
			return ref
		}
	}
	return ""
}
