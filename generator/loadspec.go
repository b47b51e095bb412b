package generator

import (
	"context"

	"github.com/idemgen/idemgen/generator/gocode"
	"github.com/idemgen/idemgen/generator/load"
	"github.com/idemgen/idemgen/generator/model"
)

// checkSpec reads the spec at file, showing it as display in diagnostics,
// and runs every check of the spec alone: the loader's, and the Go
// emitter's name check. validate and generate both come through here, so
// that they report the same diagnostics on the same spec. spec is nil when
// any diagnostic is an error.
func checkSpec(ctx context.Context, file, display, basePath string) (*model.Spec, model.Report, error) {
	rep := model.Report{Source: display}
	spec, diags, err := load.Load(ctx, file, load.Options{DisplayName: display, Operations: &rep.Operations, BasePath: basePath})
	rep.Diagnostics = diags
	if err == nil && spec != nil {
		if nameDiags := gocode.CheckNames(spec); len(nameDiags) > 0 {
			rep.Diagnostics = append(rep.Diagnostics, nameDiags...)
			spec = nil
		}
	}
	model.SortDiagnostics(rep.Diagnostics)
	return spec, rep, err
}
