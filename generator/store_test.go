package generator

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// handlerSource is a package that mounts createTransfer's adapter with a
// handler taking txType, and reads the transaction the way a strict-server
// method does, through the typed accessor.
func handlerSource(apiPkg, txImport, txType string) string {
	return `package main

import (
	"context"
	"net/http"

	` + txImport + `

	api "example.com/typed/` + apiPkg + `"
)

func main() {
	http.Handle("/transfers", api.CreateTransfer(func(w http.ResponseWriter, r *http.Request, tx ` + txType + `) {}))
	var tx ` + txType + `
	tx, err := api.CreateTransferTx(context.Background())
	_, _ = tx, err
}
`
}

// TestStoreTypedAdapters: with a store named, a transactional adapter takes
// that store's transaction type, so a handler written for the other store
// is a compile error instead of a 500 at run time; the accessor returns
// that type. Each case is compiled in a module of its own that replaces
// idemgen with this checkout.
func TestStoreTypedAdapters(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to compile the adapters: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	// The golden module's requirements and sums already cover pgx.
	gomod, err := os.ReadFile(filepath.Join(goldenDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	gomod = regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(gomod, []byte("module example.com/typed"))
	gomod = regexp.MustCompile(`(?m)=> \.\./\.\.$`).ReplaceAll(gomod, []byte("=> "+filepath.ToSlash(root)))
	gosum, err := os.ReadFile(filepath.Join(goldenDir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) { writeFile(t, mod, name, content) }
	write("go.mod", string(gomod))
	write("go.sum", string(gosum))

	const pgxImport, sqlImport = `"github.com/jackc/pgx/v5"`, `"github.com/idemgen/idemgen/runtime/sqlitestore"`
	for _, store := range []string{"postgres", "sqlite"} {
		dir := filepath.Join(goldenDir, "store-"+store)
		opts := readCaseOptions(t, dir)
		opts.Out = "api" + store
		files, diags, err := Generate(context.Background(), opts)
		if err != nil || files == nil {
			t.Fatalf("Generate %s: %v %v", store, err, diags)
		}
		write("api"+store+"/idempotency.idem.go", string(files["api"+store+"/idempotency.idem.go"]))
	}
	write("goodpostgres/main.go", handlerSource("apipostgres", pgxImport, "pgx.Tx"))
	write("badpostgres/main.go", handlerSource("apipostgres", sqlImport, "*sqlitestore.Tx"))
	write("goodsqlite/main.go", handlerSource("apisqlite", sqlImport, "*sqlitestore.Tx"))
	write("badsqlite/main.go", handlerSource("apisqlite", pgxImport, "pgx.Tx"))

	cmd := exec.Command(gobin, "build", "-o", os.DevNull, "./...")
	cmd.Dir = mod
	cmd.Env = append(goEnv(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("go build succeeded; a handler for another store must not compile:\n%s", out)
	}
	text := string(out)
	for _, bad := range []string{"badpostgres", "badsqlite"} {
		if !regexp.MustCompile(`(?m)^` + bad + `/main.go:\d+:\d+: cannot use`).MatchString(text) {
			t.Errorf("%s: want a \"cannot use\" compile error:\n%s", bad, text)
		}
	}
	for _, good := range []string{"goodpostgres", "goodsqlite", "apipostgres", "apisqlite"} {
		if strings.Contains(text, good+"/") {
			t.Errorf("%s does not compile:\n%s", good, text)
		}
	}
}
