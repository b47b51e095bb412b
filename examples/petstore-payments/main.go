// Command petstore-payments is idemgen's showcase: a small payments service
// whose POST endpoints are protected by code that idemgen generated from
// openapi.yaml. See README.md.
package main

import (
	"os"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/app"
)

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen generate --config idemgen.yaml

func main() {
	os.Exit(app.Main(os.Args[1:], os.Stderr))
}
