// Package schema holds the JSON Schemas of idemgen's inputs, for editors
// and linters: the x-idempotency extension (operation level, with the
// document level under $defs/document), the idemgen.yaml config, and
// "openapi", which applies the first to every x-idempotency of a whole
// OpenAPI document (for an editor that validates a spec file).
//
// The files beside this one are the published schemas; the binary embeds
// them so that "idemgen schema" prints the ones it was built with.
package schema

import (
	_ "embed"
	"slices"
)

// The embedded files are read through Get, which copies them, so that no
// caller can change what another one reads.
var (
	//go:embed x-idempotency.schema.json
	xIdempotency []byte
	//go:embed idemgen.schema.json
	config []byte
	//go:embed openapi-x-idempotency.schema.json
	openapi []byte
)

// Names lists the schemas by the name "idemgen schema" takes, in the
// order it lists them.
func Names() []string {
	return []string{"x-idempotency", "config", "openapi"}
}

// Get returns a copy of the schema called name, or nil.
func Get(name string) []byte {
	switch name {
	case "x-idempotency":
		return slices.Clone(xIdempotency)
	case "config":
		return slices.Clone(config)
	case "openapi":
		return slices.Clone(openapi)
	}
	return nil
}
