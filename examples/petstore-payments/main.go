// Command petstore-payments is idemgen's showcase: a small payments service
// whose POST endpoints are protected by code that idemgen generated from
// openapi.yaml. See README.md.
package main

import (
	"embed"
	"fmt"
	"io/fs"
	"os"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/app"
)

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen generate --config idemgen.yaml

// migrations are the idempotency tables' migrations that idemgen generated,
// applied at start after the business tables.
//
//go:embed migrations
var migrations embed.FS

func main() {
	dir, err := fs.Sub(migrations, "migrations")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(app.Main(os.Args[1:], dir, os.Stderr))
}
