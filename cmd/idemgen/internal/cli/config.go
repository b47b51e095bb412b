package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator"
)

// defaultConfig is read when --config is not given and the file exists.
const defaultConfig = "idemgen.yaml"

// configVersion is the only config format so far. The field exists so that
// a later format can change meaning without misreading old files.
const configVersion = 1

// settings are the generate options as flags and the config file name
// them.
type settings struct {
	Spec       string     `yaml:"spec"`
	Out        string     `yaml:"out"`
	Package    string     `yaml:"package"`
	Migrations string     `yaml:"migrations"`
	Dialects   stringList `yaml:"dialect"`
	Layout     string     `yaml:"layout"`
	Docs       string     `yaml:"docs"`
}

// configFile is idemgen.yaml. Unknown keys are an error, so a typo never
// silently falls back to a default.
type configFile struct {
	Version  int `yaml:"version"`
	settings `yaml:",inline"`
}

// resolveSettings merges the config file with the flags the user set and
// checks that the required settings are there.
func resolveSettings(cmd *cobra.Command, configPath string, flags settings) (generator.Options, error) {
	var s settings
	explicit := configPath != ""
	if !explicit {
		configPath = defaultConfig
	}
	cfg, err := readConfig(configPath)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		// No config file: flags only.
	case err != nil:
		return generator.Options{}, usageError{err}
	default:
		s = cfg
	}

	set := cmd.Flags().Changed
	if set("spec") {
		s.Spec = flags.Spec
	}
	if set("out") {
		s.Out = flags.Out
	}
	if set("package") {
		s.Package = flags.Package
	}
	if set("migrations") {
		s.Migrations = flags.Migrations
	}
	if set("dialect") {
		s.Dialects = flags.Dialects
	}
	if set("layout") {
		s.Layout = flags.Layout
	}
	if set("docs") {
		s.Docs = flags.Docs
	}

	var missing []string
	for _, m := range []struct{ name, value string }{{"--spec", s.Spec}, {"--out", s.Out}, {"--package", s.Package}} {
		if m.value == "" {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return generator.Options{}, usageError{fmt.Errorf("missing %s (as flags or in %s)", strings.Join(missing, ", "), defaultConfig)}
	}
	return generator.Options{
		Spec:       s.Spec,
		Out:        s.Out,
		Package:    s.Package,
		Migrations: s.Migrations,
		Dialects:   s.Dialects,
		Layout:     s.Layout,
		Docs:       s.Docs,
	}, nil
}

// readConfig reads a config file strictly and makes its paths relative to
// the current directory (they are written relative to the file).
func readConfig(file string) (settings, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return settings{}, fmt.Errorf("config: %w", err)
	}
	var cfg configFile
	if err := yaml.Load(data, &cfg, yaml.WithKnownFields()); err != nil {
		return settings{}, fmt.Errorf("config %s: %w", file, err)
	}
	if cfg.Version == 0 {
		return settings{}, fmt.Errorf("config %s: version is missing; start the file with \"version: %d\"", file, configVersion)
	}
	if cfg.Version != configVersion {
		return settings{}, fmt.Errorf("config %s: version: %d is not supported; write \"version: %d\"", file, cfg.Version, configVersion)
	}
	s := cfg.settings
	dir := filepath.Dir(file)
	for _, p := range []*string{&s.Spec, &s.Out, &s.Migrations, &s.Docs} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	// A comma-separated string in a list item is split like the flag.
	var dialects []string
	for _, d := range s.Dialects {
		for _, part := range strings.Split(d, ",") {
			if part = strings.TrimSpace(part); part != "" {
				dialects = append(dialects, part)
			}
		}
	}
	s.Dialects = dialects
	return s, nil
}

// stringList reads a YAML list of strings, or a single string as a list of
// one, so that "dialect: postgres" and "dialect: [postgres, sqlite]" both
// work.
type stringList []string

// UnmarshalYAML implements yaml.Unmarshaler.
func (l *stringList) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode {
		var s string
		if err := node.Load(&s); err != nil {
			return err
		}
		*l = stringList{s}
		return nil
	}
	var ss []string
	if err := node.Load(&ss); err != nil {
		return err
	}
	*l = ss
	return nil
}
