package load

import (
	"fmt"
	"os"

	yaml "go.yaml.in/yaml/v4"
)

// Document reads the spec at file as the loader reads it (JSON with
// surrogate-pair escapes, keys set twice, scalars that only YAML would
// type) and returns its top-level object as a tree that holds no alias:
// every alias is replaced by a copy of what it names, so that code that
// edits the tree (the augmented spec) edits one place and never another
// that shared it. Anchors are dropped with the aliases.
func Document(file string) (*yaml.Node, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	t, err := parseTree(src, file)
	if err != nil {
		return nil, err
	}
	return unalias(t.root), nil
}

// unalias returns a deep copy of n with every alias replaced by a copy of
// its target. parseTree has refused alias cycles, so it ends.
func unalias(n *yaml.Node) *yaml.Node {
	n = deref(n)
	if n == nil {
		return nil
	}
	c := *n
	c.Anchor = ""
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, child := range n.Content {
		c.Content[i] = unalias(child)
	}
	return &c
}
