package generator

import (
	"context"

	"github.com/idemgen/idemgen/generator/load"
	"github.com/idemgen/idemgen/generator/model"
)

// loadSpec reads the spec at file, showing it as display in diagnostics.
// Only what the generator relies on is validated: whole-document
// validation of a large spec costs several times its loading, and its
// findings are warnings that never change the output (validate runs it).
func loadSpec(ctx context.Context, file, display string, thorough bool) (*model.Spec, []model.Diagnostic, error) {
	return load.Load(ctx, file, load.Options{DisplayName: display, ValidateDocument: thorough})
}
