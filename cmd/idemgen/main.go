// Command idemgen generates idempotency-key handling for the POST and
// PATCH operations of an OpenAPI spec that carry an x-idempotency policy.
//
// Run "idemgen help" for the commands and their flags.
package main

import (
	"os"

	"github.com/idemgen/idemgen/cmd/idemgen/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
