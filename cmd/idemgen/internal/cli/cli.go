// Package cli is the idemgen command line. main calls Run; tests call it
// too, in-process, with their own arguments and streams.
//
// Exit codes: 0 when all is well, 1 when the spec has errors or --check
// finds a difference, 2 for a usage error.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/model"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// failure is an error whose message has already been printed, or that
// says exactly what to print, and that exits 1.
type failure struct{ msg string }

func (f failure) Error() string { return f.msg }

// usageError exits 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Run executes the idemgen command line with args (without the program
// name) and returns the process exit code.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	root.SetIn(stdin)
	cmd, err := root.ExecuteContextC(context.Background())
	if err == nil {
		return exitOK
	}
	var f failure
	if errors.As(err, &f) {
		if f.msg != "" {
			fmt.Fprintln(stderr, "idemgen: "+f.msg)
		}
		return exitFail
	}
	// Everything else comes from parsing the command line: a bad flag, a
	// missing one, an unknown command or option value.
	fmt.Fprintln(stderr, "idemgen: "+err.Error())
	if cmd == nil {
		cmd = root
	}
	fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	return exitUsage
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "idemgen",
		Short: "Generate idempotency-key handling from an OpenAPI spec",
		Long: `idemgen reads the x-idempotency policies of an OpenAPI spec and generates
Go code that protects those operations with idempotency keys, the SQL
migrations its stores need, and documentation for API clients.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without subcommand arguments cobra prints help; that is fine.
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newGenerate(stdout, stderr), newValidate(stdout, stderr), newVersion(stdout), newKeys(stdin, stdout, stderr), newSchema(stdout))
	return root
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}

func newGenerate(stdout, stderr io.Writer) *cobra.Command {
	var (
		flags settings
		cf    configFlags
		check bool
		show  model.Warnings
	)
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Generate Go code, SQL migrations and docs from a spec",
		Long: `generate validates the spec and writes the generated files. Nothing is
written when the spec has errors; warnings are printed and do not stop it.

Settings come from the config file, and flags override them. The config
file is --config, or else the nearest idemgen.yaml in the current directory
or a parent up to the module root (the directory of go.mod); a file found
in a parent directory is named on stderr. Paths in the config file are
relative to the file's directory. When --spec names another spec than the
found file's, that file belongs to another run and is not read.

With --check nothing is written: the command exits 1 and prints a unified
diff when the files on disk differ from what it would generate, are
missing, or are stale idemgen files.

Both compare the spec's policies with the previous ones, recorded in the
lock file idempotency.lock.json beside the generated code (or --against),
and refuse a change that breaks keys already stored (a renamed operation,
a changed scope, key source or fingerprint, a removed policy, …) unless it
is acknowledged with acceptBreaking in the config file or --accept-breaking.`,
		Example: `  idemgen generate --spec api/openapi.yaml --out api --package api --migrations migrations
  idemgen generate --check`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := resolveSettings(cmd, cf, flags, stderr)
			if err != nil {
				return err
			}
			files, rep, err := generator.Run(cmd.Context(), opts)
			if errors.Is(err, generator.ErrUsage) {
				return usageError{err}
			}
			printReport(stderr, rep, err, show)
			if err != nil {
				return failure{err.Error()}
			}
			if model.HasErrors(rep.Diagnostics) {
				return failure{}
			}
			if check {
				if diff, ok := generator.Check(files); !ok {
					fmt.Fprint(stdout, diff)
					return failure{"generated files are out of date; run idemgen generate"}
				}
				return nil
			}
			if err := generator.Write(files); err != nil {
				return failure{err.Error()}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&flags.Spec, "spec", "", "OpenAPI spec `file` (YAML or JSON)")
	f.StringVar(&flags.Out, "out", "", "`directory` of the generated Go code")
	f.StringVar(&flags.Package, "package", "", "Go package `name` of the generated code")
	f.StringVar(&flags.ClientOut, "client-out", "", "`directory` of a package of its own for the client table, importing no server code (default: the table stays in --out)")
	f.StringVar(&flags.ClientPackage, "client-package", "", "Go package `name` of the client table's package (default: the --client-out directory's name)")
	f.StringVar(&flags.Migrations, "migrations", "", "`directory` of the SQL migrations (none when empty)")
	f.StringVar(&flags.MigrationVersion, "migration-version", "", "`version` of idemgen's migration, such as 20260301120000 (default 1)")
	f.StringVar(&flags.MigrationTable, "migration-table", "", "migrations `table` of idemgen's own, for a --migrations directory of its own")
	f.StringSliceVar(&flags.Dialects, "dialect", nil, "SQL `dialects`: postgres, sqlite or both (default postgres)")
	f.StringVar(&flags.Layout, "layout", "", "migration `layout`: golang-migrate, goose or dbmate (default golang-migrate)")
	f.StringVar(&flags.Docs, "docs", "", "Markdown `file` documenting each operation's idempotency (none when empty)")
	f.StringVar(&flags.Overlay, "overlay", "", "OpenAPI Overlay `file` adding the key parameter and idempotency answers for client generators (none when empty)")
	f.StringVar(&flags.AugmentedSpec, "augmented-spec", "", "`file` of the spec with that overlay applied, for client generators that do not apply overlays (none when empty)")
	f.StringVar(&flags.Store, "store", "", "the `store` the adapters are typed for: postgres or sqlite (default: generic)")
	registerBasePath(cmd, &flags)
	f.BoolVar(&check, "check", false, "write nothing; exit 1 with a diff when the files on disk are not up to date")
	f.StringArrayVar(&flags.AcceptBreaking, "accept-breaking", nil, "acknowledge a breaking policy change, `operationId:kind` (repeatable)")
	f.StringVar(&flags.Against, "against", "", "lock `file` to compare the policies with, such as the main branch's (default: the one beside the generated code)")
	registerWarnings(cmd, &show)
	cf.register(cmd)
	return cmd
}

func newValidate(stdout, stderr io.Writer) *cobra.Command {
	var (
		flags settings
		cf    configFlags
		show  model.Warnings
	)
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a spec's x-idempotency policies without generating anything",
		Long: `validate checks the spec and prints its diagnostics, generating nothing:
the same ones generate prints for the same spec, but for those about the
migrations on disk. It compares the policies with the lock file as generate
does (--against, or the one beside the config file's out directory) and
fails on a breaking change that acceptBreaking does not acknowledge. The
spec is --spec, or else the spec of the config file that generate would
read.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := loadSettings(cmd, cf, flags, stderr)
			if err != nil {
				return err
			}
			spec := s.Spec
			if spec == "" {
				return usageError{fmt.Errorf("--spec is required when no %s names one", configName)}
			}
			parsed, rep, err := generator.ValidatePolicies(cmd.Context(), s)
			printReport(stderr, rep, err, show)
			if errors.Is(err, generator.ErrUsage) {
				return usageError{err}
			}
			if err != nil {
				return failure{err.Error()}
			}
			if parsed == nil {
				return failure{}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&flags.Spec, "spec", "", "OpenAPI spec `file` (YAML or JSON)")
	f.StringVar(&flags.Out, "out", "", "`directory` of the generated Go code, where the lock file is")
	f.StringArrayVar(&flags.AcceptBreaking, "accept-breaking", nil, "acknowledge a breaking policy change, `operationId:kind` (repeatable)")
	f.StringVar(&flags.Against, "against", "", "lock `file` to compare the policies with (default: the one in --out)")
	registerBasePath(cmd, &flags)
	registerWarnings(cmd, &show)
	cf.register(cmd)
	return cmd
}

// registerBasePath adds --base-path, which generate and validate read alike.
func registerBasePath(cmd *cobra.Command, flags *settings) {
	cmd.Flags().StringVar(&flags.BasePath, "base-path", "", "the `prefix` the service is served under, such as /v1 (\"/\" for none; default: the spec's servers)")
}

func newVersion(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print idemgen's version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(stdout, "idemgen "+version())
			return nil
		},
	}
}

// version is the module version the binary was built from; a build from a
// source tree has none and says "(devel)".
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Version == "" {
		return "(devel)"
	}
	return info.Main.Version
}

// printReport prints a run's diagnostics and its summary line, the same
// way for generate and validate. A run that stopped before it could read
// the spec (err, and nothing found) has nothing to sum up.
func printReport(w io.Writer, rep model.Report, err error, show model.Warnings) {
	if err != nil && len(rep.Diagnostics) == 0 {
		return
	}
	_ = rep.Write(w, show) // a lost stderr has no one left to tell
}

// warningsValue is the --warnings flag: a mode ParseWarnings reads, so
// that a wrong one is a usage error when the flags are parsed.
type warningsValue struct{ w *model.Warnings }

func (v warningsValue) String() string { return v.w.String() }
func (v warningsValue) Type() string   { return "mode" }

func (v warningsValue) Set(s string) error {
	w, err := model.ParseWarnings(s)
	if err != nil {
		return err
	}
	*v.w = w
	return nil
}

func registerWarnings(cmd *cobra.Command, show *model.Warnings) {
	cmd.Flags().Var(warningsValue{show}, "warnings", "how warnings are shown: all, summary (counted only) or off")
}
