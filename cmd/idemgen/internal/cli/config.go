package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/load"
	"github.com/idemgen/idemgen/generator/model"
)

// configName is the config file idemgen looks for when --config is not
// given.
const configName = "idemgen.yaml"

// configVersion is the only config format so far. The field exists so that
// a later format can change meaning without misreading old files.
const configVersion = 1

// settings are the generate options as flags and the config file name
// them; Dir stays empty (paths are relative to the working directory).
type settings = generator.Options

// stringSettings pairs each string setting's config key and flag name
// (they are the same words) with its place in s, so that reading the file
// and merging the flags walk one list.
func stringSettings(s *settings) []struct {
	key, flag string
	value     *string
} {
	return []struct {
		key, flag string
		value     *string
	}{
		{"spec", "spec", &s.Spec},
		{"out", "out", &s.Out},
		{"package", "package", &s.Package},
		{"clientOut", "client-out", &s.ClientOut},
		{"clientPackage", "client-package", &s.ClientPackage},
		{"migrations", "migrations", &s.Migrations},
		{"migrationVersion", "migration-version", &s.MigrationVersion},
		{"migrationTable", "migration-table", &s.MigrationTable},
		{"layout", "layout", &s.Layout},
		{"docs", "docs", &s.Docs},
		{"overlay", "overlay", &s.Overlay},
		{"augmentedSpec", "augmented-spec", &s.AugmentedSpec},
		{"store", "store", &s.Store},
		{"basePath", "base-path", &s.BasePath},
	}
}

// configKeys lists every key idemgen.yaml may hold, for "did you mean".
func configKeys() []string {
	keys := []string{"version", "dialect", "acceptBreaking"}
	for _, f := range stringSettings(new(settings)) {
		keys = append(keys, f.key)
	}
	return keys
}

// configFlags are the flags shared by the commands that read the config.
type configFlags struct {
	path    string
	verbose bool
}

func (c *configFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.path, "config", "", "config `file` (default: the nearest "+configName+" up to the module root)")
	cmd.Flags().BoolVarP(&c.verbose, "verbose", "v", false, "say which config file is used, or why none is")
}

// loadSettings finds and reads the config file and lays the flags the
// user set over it.
//
// Without --config, the nearest idemgen.yaml in the working directory or
// a parent, up to the module root, applies, as go generate users expect
// from a sub-package. When --spec is given and names another spec than
// that file's, the file belongs to another run and is not read into this
// one: flags alone must never pick up an unrelated file's outputs (its
// docs page, its migrations). --config always applies.
func loadSettings(cmd *cobra.Command, cf configFlags, flags settings, stderr io.Writer) (settings, error) {
	set := cmd.Flags().Changed
	file := cf.path
	explicit := file != ""
	if !explicit {
		found, err := findConfig()
		if err != nil {
			return settings{}, usageError{err}
		}
		file = found
	}

	var s settings
	if file == "" {
		if cf.verbose {
			fmt.Fprintf(stderr, "idemgen: no %s here or above up to the module root; flags only\n", configName)
		}
	} else {
		cfg, err := readConfig(file)
		if err != nil {
			return settings{}, usageError{err}
		}
		switch {
		case !explicit && set("spec") && !sameFile(cfg.Spec, flags.Spec):
			if cf.verbose {
				fmt.Fprintf(stderr, "idemgen: not using %s: its spec is %s, not %s (name it with --config to use it)\n", file, cfg.Spec, flags.Spec)
			}
		default:
			s = cfg
			// A file from a parent directory is announced: paths then
			// resolve from there, which a user should not have to guess.
			if cf.verbose || filepath.Dir(file) != "." {
				fmt.Fprintf(stderr, "idemgen: using %s\n", file)
			}
		}
	}

	given := stringSettings(&flags)
	for i, f := range stringSettings(&s) {
		if set(f.flag) {
			*f.value = *given[i].value
		}
	}
	if set("dialect") {
		s.Dialects = flags.Dialects
	}
	// Acknowledgements add up: the file's, for the change a PR makes, and
	// the command line's.
	if set("accept-breaking") {
		s.AcceptBreaking = append(s.AcceptBreaking, flags.AcceptBreaking...)
	}
	if set("against") {
		s.Against = flags.Against
	}
	return s, nil
}

// resolveSettings reads the settings of generate and checks that the
// required ones are there.
func resolveSettings(cmd *cobra.Command, cf configFlags, flags settings, stderr io.Writer) (generator.Options, error) {
	s, err := loadSettings(cmd, cf, flags, stderr)
	if err != nil {
		return generator.Options{}, err
	}
	var missing []string
	for _, m := range []struct{ name, value string }{{"--spec", s.Spec}, {"--out", s.Out}, {"--package", s.Package}} {
		if m.value == "" {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return generator.Options{}, usageError{fmt.Errorf("missing %s (as flags or in %s)", strings.Join(missing, ", "), configName)}
	}
	return s, nil
}

// findConfig returns the path, relative to the working directory, of the
// nearest idemgen.yaml in the working directory or a parent up to the
// module root (the nearest directory holding go.mod), or "" when there is
// none. Outside a module only the working directory is looked at, so that
// a stray file higher up the disk is never picked up.
func findConfig() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find %s: %w", configName, err)
	}
	var dirs []string
	inModule := false
	for d := wd; ; {
		dirs = append(dirs, d)
		ok, err := isFile(filepath.Join(d, "go.mod"))
		if err != nil {
			return "", fmt.Errorf("find %s: %w", configName, err)
		}
		if ok {
			inModule = true
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if !inModule {
		dirs = dirs[:1]
	}
	for up, d := range dirs {
		ok, err := isFile(filepath.Join(d, configName))
		if err != nil {
			return "", fmt.Errorf("find %s: %w", configName, err)
		}
		if ok {
			return filepath.Join(strings.Repeat(".."+string(filepath.Separator), up), configName), nil
		}
	}
	return "", nil
}

// isFile reports whether a regular file exists at p.
func isFile(p string) (bool, error) {
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.Mode().IsRegular(), nil
}

// sameFile reports whether a and b name the same file.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// readConfig reads a config file strictly and makes its paths relative to
// the current directory (they are written relative to the file).
func readConfig(file string) (settings, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return settings{}, fmt.Errorf("config: %w", err)
	}
	s, err := decodeConfig(file, data)
	if err != nil {
		return settings{}, err
	}
	dir := filepath.Dir(file)
	for _, p := range []*string{&s.Spec, &s.Out, &s.ClientOut, &s.Migrations, &s.Docs, &s.Overlay, &s.AugmentedSpec} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return s, nil
}

// decodeConfig decodes the YAML of a config file from its node tree, so
// that every mistake is reported at its line and column in the file's own
// words: an unknown key with a "did you mean", a wrong kind of value with
// what was expected. Every mistake is reported, not only the first.
func decodeConfig(file string, data []byte) (settings, error) {
	var doc yaml.Node
	if err := yaml.Load(data, &doc); err != nil {
		return settings{}, fmt.Errorf("config %s: %w", file, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return settings{}, fmt.Errorf("config %s: want a mapping of settings that starts with \"version: %d\"", file, configVersion)
	}
	m := doc.Content[0]
	var (
		s       settings
		version *yaml.Node
		errs    []string
	)
	fail := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s:%d:%d: error: ", file, n.Line, n.Column)+fmt.Sprintf(format, args...))
	}
	seen := make(map[string]bool)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if seen[k.Value] {
			fail(k, "%s is set twice", k.Value)
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "version":
			version = v
		case "dialect":
			list, err := stringList(v)
			if err != nil {
				fail(v, "dialect: %v", err)
			}
			s.Dialects = list
		case "acceptBreaking":
			list, err := stringList(v)
			if err != nil {
				fail(v, "acceptBreaking: %v", err)
			}
			s.AcceptBreaking = list
			s.AckPos = ackPositions(file, v)
		default:
			p := settingOrNil(&s, k.Value)
			if p == nil {
				msg := fmt.Sprintf("unknown key %q", k.Value)
				if near := load.Suggest(k.Value, configKeys()); near != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", near)
				}
				fail(k, "%s", msg)
				continue
			}
			str, err := scalarString(v)
			if err != nil {
				fail(v, "%s: %v", k.Value, err)
			}
			*p = str
		}
	}
	switch {
	case version == nil:
		errs = append(errs, fmt.Sprintf("config %s: version is missing; start the file with \"version: %d\"", file, configVersion))
	case version.Kind != yaml.ScalarNode || version.Value != strconv.Itoa(configVersion):
		fail(version, "version: %s is not supported; write \"version: %d\"", version.Value, configVersion)
	}
	if len(errs) > 0 {
		return settings{}, errors.New(strings.Join(errs, "\n"))
	}
	return s, nil
}

// settingOrNil returns the string setting with config key key, or nil.
func settingOrNil(s *settings, key string) *string {
	for _, f := range stringSettings(s) {
		if f.key == key {
			return f.value
		}
	}
	return nil
}

// scalarString returns a scalar's text as written: a version number keeps
// its leading zeros.
func scalarString(n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int") {
		return "", fmt.Errorf("want a string, got %s", load.Describe(n))
	}
	return n.Value, nil
}

// stringList reads a YAML list of strings, or a single string as a list
// of one; a comma-separated string is split like the flag, so that
// "dialect: postgres", "dialect: postgres,sqlite" and "dialect: [postgres,
// sqlite]" all work.
func stringList(n *yaml.Node) ([]string, error) {
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	var out []string
	for _, item := range items {
		str, err := scalarString(item)
		if err != nil {
			return nil, fmt.Errorf("want a name or a list of names, got %s", load.Describe(item))
		}
		for _, part := range strings.Split(str, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out, nil
}

// ackPositions places each acknowledgement of the config file's
// acceptBreaking value v at the entry that names it.
func ackPositions(file string, v *yaml.Node) map[string]model.Pos {
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		items = v.Content
	}
	out := make(map[string]model.Pos)
	for _, item := range items {
		names, _ := stringList(item) // the whole value decoded already
		for _, a := range names {
			if _, seen := out[a]; !seen {
				out[a] = model.Pos{File: file, Line: item.Line, Col: item.Column}
			}
		}
	}
	return out
}
