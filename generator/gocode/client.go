package gocode

import (
	"fmt"
	"go/token"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/model"
)

// pathIdemClient is the client runtime the client table is written for.
const pathIdemClient = "github.com/idemgen/idemgen/runtime/idemclient"

// clientTableName is the function that returns the client table.
const clientTableName = "ClientOperations"

// ClientFileName is the name of the generated Go file of the client
// table's own package.
const ClientFileName = "client.idem.go"

// EmitClient renders the client table as a package of its own, for a
// client module: the operation IDs and ClientOperations, importing
// idemclient and the standard library only, so that a client SDK builds
// without the server engine or a database driver. Emit then leaves the
// table out (Options.NoClientTable). Its diagnostics are Emit's: both files
// derive their names from the same operations.
func EmitClient(spec *model.Spec, opts Options) ([]byte, []model.Diagnostic, error) {
	if !token.IsIdentifier(opts.Package) || opts.Package == "_" {
		return nil, nil, fmt.Errorf("gocode: client package name %q is not a Go identifier", opts.Package)
	}
	if diags := CheckNames(spec); len(diags) > 0 {
		return nil, diags, nil
	}
	ops := sortedOps(spec.Operations)
	f := newFile(opts.Package, opts.Source)
	for _, line := range wrap("Package "+opts.Package+" is what a client needs to call the annotated operations of "+
		commentText(opts.Source)+" safely, through an idemclient.Transport. It imports no server code.", 77) {
		f.PackageComment(line)
	}
	emitConsts(f, ops)
	emitBasePath(f, spec.BasePath)
	emitClientTable(f, ops, spec.Unprotected)
	src, err := render(f)
	return src, nil, err
}

// emitClientTable writes ClientOperations: what a client needs to call each
// annotated operation safely (method, path template, key source, TTL and
// retry budget) and nothing of the server's (lease, snapshots,
// fingerprint), so that client code can import it without learning how
// the server stores keys.
func emitClientTable(f *jen.File, ops []model.Operation, unprotected []model.Route) {
	f.Comment(clientTableName + " returns what an idemclient.Transport needs to know of")
	f.Comment("every annotated operation, sorted by path and method.")
	if len(unprotected) > 0 {
		f.Comment("Then come the operations without a policy that a protected template also")
		f.Comment("matches and that are more specific, marked Unprotected: the server's router")
		f.Comment("sends their requests to them, so the Transport sends those once, with no key.")
	}
	items := make([]jen.Code, len(ops))
	for i, op := range ops {
		p := op.Policy
		fields := []jen.Code{
			field("ID", jen.Id("Op"+op.GoName)),
			field("Method", methodCode(op.Method)),
			field("Path", jen.Lit(op.Path)),
			field("Key", jen.Qual(pathIdemClient, "Key").Values(
				jen.Id("In").Op(":").Add(keyInCode(p.KeyIn)),
				jen.Id("Name").Op(":").Lit(p.KeyName),
			)),
			field("KeyMaxLength", jen.Lit(p.KeyMaxLength)),
			field("TTL", DurationCode(p.TTL)),
		}
		if p.ClientRetryBudget > 0 {
			fields = append(fields, field("RetryBudget", DurationCode(p.ClientRetryBudget)))
		}
		items[i] = jen.Custom(multi, fields...)
	}
	for _, r := range unprotected {
		items = append(items, jen.Custom(multi,
			field("ID", jen.Lit(r.ID)),
			field("Method", methodCode(r.Method)),
			field("Path", jen.Lit(r.Path)),
			field("Unprotected", jen.True()),
		))
	}
	var body jen.Code
	if len(ops) == 0 {
		body = jen.Return(jen.Nil())
	} else {
		body = jen.Return(jen.Index().Qual(pathIdemClient, "Operation").Custom(multi, items...))
	}
	f.Func().Id(clientTableName).Params().Index().Qual(pathIdemClient, "Operation").Block(body)
}
