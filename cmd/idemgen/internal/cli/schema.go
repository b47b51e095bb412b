package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/schema"
)

// newSchema prints one of the JSON Schemas the binary embeds, for editors
// and linters that want the one matching the idemgen in use.
func newSchema(stdout io.Writer) *cobra.Command {
	names := schema.Names()
	return &cobra.Command{
		Use:   "schema [" + strings.Join(names, "|") + "]",
		Short: "Print the JSON Schema of x-idempotency (the default), of idemgen.yaml, or of a whole spec's x-idempotency values",
		Long: `schema prints a JSON Schema (draft 2020-12) for editors and linters:
x-idempotency, the extension's value on an operation (the document level is
its $defs/document); config, the idemgen.yaml file; or openapi, which
checks every x-idempotency of an OpenAPI document and nothing else (it
refers to x-idempotency.schema.json beside it).`,
		ValidArgs: names,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("schema takes one name, got %q", args)}
			}
			name := names[0]
			if len(args) == 1 {
				name = args[0]
			}
			doc := schema.Get(name)
			if doc == nil {
				return usageError{fmt.Errorf("no schema %q (use %s)", name, strings.Join(names, " or "))}
			}
			if _, err := stdout.Write(doc); err != nil {
				return fmt.Errorf("schema: %w", err)
			}
			return nil
		},
	}
}
