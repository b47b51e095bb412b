// Package generator turns an OpenAPI spec with x-idempotency policies into
// idemgen's output files.
//
// Generate returns every output file in memory, keyed by path. One map
// serves three uses: Write puts it on disk, Check compares it with the
// disk (for --check in CI), and the golden tests compare it with the
// committed expectations. Nothing is written before the whole spec has
// been validated.
//
// Migrations are the exception to "regenerate freely": a migration tool
// records the versions it applied and never reads those files again, so
// an edited migration would leave every database that ran the old one
// silently behind. Generate therefore refuses, with an error diagnostic,
// when a migration it would write already exists with other content, or
// under another version. The fix is the user's call: delete the file if
// it was never applied anywhere, or keep it and write an upgrade
// migration.
//
// Migrations also have to fit the application's own: a new idemgen
// migration whose version is not greater than every other migration's in
// its directory would be skipped by golang-migrate (silently) or refused
// by goose, so Generate refuses it and names the two ways out: a greater
// version (MigrationVersion), or a directory and migrations table of
// idemgen's own (MigrationTable).
package generator

import (
	"context"
	"errors"
	"fmt"
	"go/token"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/generator/docgen"
	"github.com/idemgen/idemgen/generator/gocode"
	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/generator/overlay"
	"github.com/idemgen/idemgen/generator/sqlgen"
)

// Options says what to generate and where. Paths are taken as given and
// resolved against Dir; the keys of Generate's map keep them as given,
// slash-separated.
type Options struct {
	// Spec is the path of the OpenAPI document.
	Spec string
	// Out is the directory of the generated Go code.
	Out string
	// Package is the Go package name of the generated code.
	Package string
	// ClientOut is the directory of a package of its own for the client
	// table (ClientOperations), which imports idemclient and the standard
	// library only, so that a client module builds without the server's
	// dependencies; the table then leaves the package in Out. "" keeps it
	// there.
	ClientOut string
	// ClientPackage is the Go package name of ClientOut's package; ""
	// is the directory's name.
	ClientPackage string
	// Migrations is the directory of the SQL migrations; "" writes none.
	Migrations string
	// MigrationVersion is the version of idemgen's migration as its file
	// name spells it, digits only ("20260301120000"); "" is 1, padded to
	// the layout's usual width. It must be greater than every other
	// migration's in the directory, or the migration tool would skip it.
	MigrationVersion string
	// MigrationTable is a migrations table of idemgen's own. With it,
	// Migrations must be a directory of idemgen's own too, and a README.md
	// there gives the command that applies it with that table.
	MigrationTable string
	// Dialects are the SQL dialects, "postgres" and/or "sqlite"; empty
	// means postgres.
	Dialects []string
	// Layout is the migration layout: "golang-migrate" (the default),
	// "goose" or "dbmate".
	Layout string
	// Docs is the path of the generated API documentation page (Markdown);
	// "" writes none.
	Docs string
	// Overlay is the path of the OpenAPI Overlay that adds the
	// idempotency layer's key parameter and answers to the spec, for
	// client generators; "" writes none.
	Overlay string
	// AugmentedSpec is the path of the spec with that overlay applied, for
	// client generators that do not apply overlays; "" writes none.
	AugmentedSpec string
	// BasePath is the prefix the service is served under ("/v1"; "/" for
	// none), taken instead of the one the spec's servers give; it must be
	// set when they give several.
	BasePath string
	// Store is the store the transactional adapters are typed for,
	// "postgres" (pgx.Tx) or "sqlite" (*sql.Tx); "" keeps them generic
	// over the transaction type, for code that serves several stores.
	Store string
	// Dir is the directory relative paths are resolved against; "" is the
	// current directory.
	Dir string

	// AcceptBreaking acknowledges breaking policy changes by name,
	// "operationId:kind" (see package breaking), so that they are
	// generated instead of refused.
	AcceptBreaking []string
	// AckPos says where each of AcceptBreaking was written (its entry in
	// the config file), for the warning about one that names no change;
	// one missing from it came from the command line.
	AckPos map[string]model.Pos
	// Against is a lock file to compare the spec with instead of the one
	// beside the generated code, such as the main branch's in CI.
	Against string
}

// ErrUsage marks errors caused by the options rather than by the spec.
var ErrUsage = errors.New("invalid options")

// Generate loads and validates the spec and renders every output file.
// Diagnostics are sorted; when any is an error, files is nil. err reports
// what stops generation outright: bad options, an unreadable spec, an I/O
// failure. It is Run without the count of operations.
func Generate(ctx context.Context, opts Options) (map[string][]byte, []model.Diagnostic, error) {
	files, rep, err := Run(ctx, opts)
	return files, rep.Diagnostics, err
}

// Run is Generate with the whole report: the diagnostics and how many
// operations opt in to a policy, for the summary line the command prints.
func Run(ctx context.Context, opts Options) (map[string][]byte, model.Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, model.Report{}, err
	}
	spec, rep, err := checkSpec(ctx, opts.resolve(opts.Spec), opts.Spec, opts.BasePath)
	if err != nil || spec == nil {
		return nil, rep, err
	}
	files, diags, err := emit(spec, opts)
	rep.Diagnostics = append(rep.Diagnostics, diags...)
	model.SortDiagnostics(rep.Diagnostics)
	if err != nil || model.HasErrors(rep.Diagnostics) {
		return nil, rep, err
	}
	return files, rep, nil
}

// emit renders every output file of a spec that has no errors, with what
// the emitters and the checks against the disk and the lock file find.
func emit(spec *model.Spec, opts Options) (map[string][]byte, []model.Diagnostic, error) {
	var diags []model.Diagnostic
	files := newOutputs(opts)
	goSrc, goDiags, err := gocode.Emit(spec, gocode.Options{
		Package:       opts.Package,
		Source:        opts.specFrom(opts.Out),
		Store:         opts.Store,
		NoClientTable: opts.ClientOut != "",
	})
	if err != nil {
		return nil, diags, fmt.Errorf("generate Go code: %w", err)
	}
	diags = append(diags, goDiags...)
	if err := files.add("the Go code", path.Join(filepath.ToSlash(opts.Out), gocode.FileName), goSrc); err != nil {
		return nil, diags, err
	}
	if opts.ClientOut != "" {
		clientSrc, _, err := gocode.EmitClient(spec, gocode.Options{
			Package: opts.ClientPackage,
			Source:  opts.specFrom(opts.ClientOut),
		})
		if err != nil {
			return nil, diags, fmt.Errorf("generate the client table: %w", err)
		}
		if err := files.add("the client table", path.Join(filepath.ToSlash(opts.ClientOut), gocode.ClientFileName), clientSrc); err != nil {
			return nil, diags, err
		}
	}

	lockName, lock, lockDiags, err := lockFile(opts, spec)
	if err != nil {
		return nil, diags, err
	}
	diags = append(diags, lockDiags...)
	if err := files.add("the lock file", lockName, lock); err != nil {
		return nil, diags, err
	}

	if opts.Migrations != "" {
		migrations, err := sqlgen.Emit(sqlgen.Options{
			Dir:        filepath.ToSlash(opts.Migrations),
			Dialects:   opts.Dialects,
			Layout:     opts.Layout,
			Version:    opts.MigrationVersion,
			Table:      opts.MigrationTable,
			Migrations: sqlgen.Migrations(),
		})
		if err != nil {
			return nil, diags, fmt.Errorf("generate migrations: %w", err)
		}
		migDiags, err := checkMigrations(opts.Dir, opts, migrations)
		if err != nil {
			return nil, diags, err
		}
		diags = append(diags, migDiags...)
		for _, p := range sortedKeys(migrations) {
			if err := files.add("a migration", p, migrations[p]); err != nil {
				return nil, diags, err
			}
		}
	}

	if opts.Docs != "" {
		page, err := docgen.Emit(spec, docgen.Options{Source: opts.specFrom(filepath.Dir(opts.Docs))})
		if err != nil {
			return nil, diags, fmt.Errorf("generate docs: %w", err)
		}
		if err := files.add("the docs page (docs)", filepath.ToSlash(opts.Docs), page); err != nil {
			return nil, diags, err
		}
	}

	if opts.Overlay != "" {
		doc, err := overlay.Emit(spec, overlay.Options{Extends: opts.specFrom(filepath.Dir(opts.Overlay)), Spec: opts.resolve(opts.Spec)})
		if err != nil {
			return nil, diags, fmt.Errorf("generate overlay: %w", err)
		}
		if err := files.add("the overlay (overlay)", filepath.ToSlash(opts.Overlay), doc); err != nil {
			return nil, diags, err
		}
	}

	if opts.AugmentedSpec != "" {
		doc, err := overlay.Augment(spec, overlay.AugmentOptions{
			Source: opts.specFrom(filepath.Dir(opts.AugmentedSpec)),
			Spec:   opts.resolve(opts.Spec),
			Out:    opts.resolve(opts.AugmentedSpec),
		})
		if err != nil {
			return nil, diags, fmt.Errorf("generate augmented spec: %w", err)
		}
		if err := files.add("the augmented spec (augmentedSpec)", filepath.ToSlash(opts.AugmentedSpec), doc); err != nil {
			return nil, diags, err
		}
	}
	return files.files, diags, nil
}

// checkBasePath refuses a base path the engine would refuse: one that does
// not start with "/".
func checkBasePath(p string) error {
	if p != "" && !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w: basePath %q does not start with /", ErrUsage, p)
	}
	return nil
}

// withDefaults fills in defaults and rejects options no spec can fix.
func (o Options) withDefaults() (Options, error) {
	if o.Spec == "" {
		return o, fmt.Errorf("%w: no spec given", ErrUsage)
	}
	if o.Out == "" {
		return o, fmt.Errorf("%w: no output directory given", ErrUsage)
	}
	if !token.IsIdentifier(o.Package) || o.Package == "_" {
		return o, fmt.Errorf("%w: package name %q is not a Go identifier", ErrUsage, o.Package)
	}
	if o.ClientOut != "" {
		if o.ClientPackage == "" {
			o.ClientPackage = filepath.Base(filepath.Clean(o.ClientOut))
		}
		if !token.IsIdentifier(o.ClientPackage) || o.ClientPackage == "_" {
			return o, fmt.Errorf("%w: client package name %q is not a Go identifier (name it with clientPackage)", ErrUsage, o.ClientPackage)
		}
		if filepath.Clean(o.ClientOut) == filepath.Clean(o.Out) {
			return o, fmt.Errorf("%w: the client table's directory is the generated code's own (%s); give it a directory of its own", ErrUsage, o.ClientOut)
		}
	} else if o.ClientPackage != "" {
		return o, fmt.Errorf("%w: a client package name needs a client directory (clientOut)", ErrUsage)
	}
	if err := checkAcks(o.AcceptBreaking); err != nil {
		return o, err
	}
	if o.Store != "" && !slices.Contains(gocode.Stores, o.Store) {
		return o, fmt.Errorf("%w: unknown store %q (use %s)", ErrUsage, o.Store, strings.Join(gocode.Stores, ", "))
	}
	if err := checkBasePath(o.BasePath); err != nil {
		return o, err
	}
	if o.Layout == "" {
		o.Layout = sqlgen.LayoutGolangMigrate
	}
	if !slices.Contains(sqlgen.Layouts, o.Layout) {
		return o, fmt.Errorf("%w: unknown migration layout %q (use %s)", ErrUsage, o.Layout, strings.Join(sqlgen.Layouts, ", "))
	}
	if o.MigrationVersion != "" {
		if err := sqlgen.ValidVersion(o.MigrationVersion); err != nil {
			return o, fmt.Errorf("%w: %w", ErrUsage, err)
		}
	}
	if o.MigrationTable != "" {
		if err := sqlgen.ValidTable(o.MigrationTable); err != nil {
			return o, fmt.Errorf("%w: %w", ErrUsage, err)
		}
	}
	if o.Migrations == "" && (o.MigrationVersion != "" || o.MigrationTable != "") {
		return o, fmt.Errorf("%w: a migration version or table needs a migrations directory", ErrUsage)
	}
	if len(o.Dialects) == 0 {
		o.Dialects = []string{"postgres"}
	}
	seen := make(map[string]bool)
	for _, d := range o.Dialects {
		if !slices.Contains(sqlgen.Dialects, d) {
			return o, fmt.Errorf("%w: unknown SQL dialect %q (use %s)", ErrUsage, d, strings.Join(sqlgen.Dialects, ", "))
		}
		if seen[d] {
			return o, fmt.Errorf("%w: dialect %q given twice", ErrUsage, d)
		}
		seen[d] = true
	}
	// Output order follows sqlgen.Dialects, whatever order the user chose,
	// so "sqlite,postgres" and "postgres,sqlite" give the same files.
	var ordered []string
	for _, d := range sqlgen.Dialects {
		if seen[d] {
			ordered = append(ordered, d)
		}
	}
	o.Dialects = ordered
	return o, nil
}

// outputs collects the files generate writes, keyed by path, and
// refuses a second file at a path already taken, or one at the spec's:
// generate would write one over the other (the docs page over the spec,
// the lock file or a migration), and the next run would read the wrong
// file. Every output goes through add, so every one is checked.
type outputs struct {
	o     Options
	files map[string][]byte
	taken map[string]string // each cleaned absolute path: what is there
}

func newOutputs(o Options) *outputs {
	out := &outputs{o: o, files: make(map[string][]byte), taken: make(map[string]string)}
	out.taken[out.where(o.Spec)] = "the spec"
	return out
}

// add puts data, which is what, at the slash-separated path p.
func (out *outputs) add(what, p string, data []byte) error {
	at := out.where(filepath.FromSlash(p))
	if other, ok := out.taken[at]; ok {
		return fmt.Errorf("%w: %s and %s are both %s; give each a path of its own", ErrUsage, other, what, p)
	}
	out.taken[at] = what
	out.files[p] = data
	return nil
}

// where is the path p names, cleaned and absolute when it can be, so
// that two spellings of one path are one.
func (out *outputs) where(p string) string {
	p = filepath.Clean(out.o.resolve(p))
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return p
}

// resolve returns p relative to the options' base directory.
func (o Options) resolve(p string) string {
	return resolveIn(o.Dir, p)
}

func resolveIn(dir, p string) string {
	if dir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// specFrom returns the spec's path relative to the output directory dir,
// for the "source:" headers.
func (o Options) specFrom(dir string) string {
	if filepath.IsAbs(dir) != filepath.IsAbs(o.Spec) {
		return relSlash(o.resolve(dir), o.resolve(o.Spec))
	}
	return relSlash(dir, o.Spec)
}

// relSlash returns target relative to the directory from, slash-separated,
// for the "source:" headers. Both are relative to the same base; when one
// is absolute and the other is not, the base of the working directory is
// used so that the header still names the spec without a machine's path.
func relSlash(from, target string) string {
	if filepath.IsAbs(from) != filepath.IsAbs(target) {
		if abs, err := filepath.Abs(from); err == nil {
			from = abs
		}
		if abs, err := filepath.Abs(target); err == nil {
			target = abs
		}
	}
	rel, err := filepath.Rel(from, target)
	if err != nil {
		return filepath.ToSlash(filepath.Base(target))
	}
	return filepath.ToSlash(rel)
}

// Validate loads and validates the spec at file and returns its policy
// model (nil when it has errors) and its report, generating nothing. Its
// diagnostics are the ones Generate reports on the same spec, but for
// those about the output: the lock file, the migrations on disk.
func Validate(ctx context.Context, file string) (*model.Spec, model.Report, error) {
	return checkSpec(ctx, file, file, "")
}

// ValidatePolicies is Validate with the spec's policies compared with the
// lock file as Generate compares them: opts.Against, or else the lock file
// beside opts.Out. A breaking change that opts.AcceptBreaking does not
// acknowledge is an error, and the model is then nil. Without Out and
// Against there is no lock file to compare with, and it is Validate.
func ValidatePolicies(ctx context.Context, opts Options) (*model.Spec, model.Report, error) {
	if err := checkAcks(opts.AcceptBreaking); err != nil {
		return nil, model.Report{}, err
	}
	if err := checkBasePath(opts.BasePath); err != nil {
		return nil, model.Report{}, err
	}
	spec, rep, err := checkSpec(ctx, opts.resolve(opts.Spec), opts.Spec, opts.BasePath)
	if err != nil || spec == nil || (opts.Out == "" && opts.Against == "") {
		return spec, rep, err
	}
	_, _, diags, err := lockFile(opts, spec)
	if err != nil {
		return nil, rep, err
	}
	rep.Diagnostics = append(rep.Diagnostics, diags...)
	model.SortDiagnostics(rep.Diagnostics)
	if model.HasErrors(rep.Diagnostics) {
		spec = nil
	}
	return spec, rep, nil
}
