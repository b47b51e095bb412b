package generator

import (
	"fmt"
	"path"
	"path/filepath"

	"github.com/idemgen/idemgen/generator/breaking"
	"github.com/idemgen/idemgen/generator/model"
)

// lockFile renders the lock file of spec (see package breaking) and
// compares spec with the previous one: opts.Against when given, else the
// lock file already at its place, which is the one of the last
// generation. Breaking changes that opts.AcceptBreaking does not name are
// error diagnostics, so that generate writes nothing and --check fails.
func lockFile(opts Options, spec *model.Spec) (name string, content []byte, diags []model.Diagnostic, err error) {
	name = path.Join(filepath.ToSlash(opts.Out), breaking.FileName)
	prevFile, required := opts.resolve(filepath.FromSlash(name)), false
	if opts.Against != "" {
		prevFile, required = opts.resolve(opts.Against), true
	}
	prev, err := breaking.ReadLock(prevFile, required)
	if err != nil {
		return "", nil, nil, err
	}
	content, err = breaking.Encode(spec)
	if err != nil {
		return "", nil, nil, err
	}
	return name, content, breaking.Diagnostics(breaking.Compare(prev, spec), opts.AcceptBreaking, opts.AckPos), nil
}

// checkAcks rejects acknowledgements that name no kind of change.
func checkAcks(acks []string) error {
	for _, a := range acks {
		if _, _, err := breaking.ParseAck(a); err != nil {
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
	}
	return nil
}
