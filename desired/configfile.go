package desired

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/enidnet/enid/internal/fileread"
)

// This file reads the config files: the main file and its drop-ins, parsed
// strictly, merged in order, node overrides applied (LoadConfig,
// ParseConfig).

// ConfigSource names the config files: a main file and a directory of
// drop-ins (*.yaml, merged in lexical order after the main file).
type ConfigSource struct {
	Main      string
	DropInDir string
}

// DefaultConfigSource returns /etc/enid/config.yaml and /etc/enid/config.d.
func DefaultConfigSource() ConfigSource {
	return ConfigSource{Main: DefaultConfigFile, DropInDir: DefaultDropInDir}
}

// ErrNoConfig is wrapped by LoadConfig's error when no config file exists at
// all; the Config returned with it is DefaultConfig().
var ErrNoConfig = errors.New("no config file found")

// ConfigError is every problem found in a config, so an operator can fix
// them all in one go. errors.As(err, &*ConfigError) gives the list.
type ConfigError struct {
	Problems []Problem
	// NoFiles is true when there was no config file at all.
	NoFiles bool
}

// Error lists the problems, one per line.
func (e *ConfigError) Error() string {
	lines := make([]string, 0, len(e.Problems)+1)
	lines = append(lines, fmt.Sprintf("invalid config (%d problem%s):", len(e.Problems), plural(len(e.Problems))))
	for _, p := range e.Problems {
		lines = append(lines, "  "+p.String())
	}
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrNoConfig) true when no config file existed.
func (e *ConfigError) Is(target error) bool { return target == ErrNoConfig && e.NoFiles }

// Strings returns the problems as "file: path: message" lines.
func (e *ConfigError) Strings() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// document is one config file's content, converted to generic JSON values.
type document struct {
	file string
	body map[string]any
}

// LoadConfig reads the main file and the drop-ins, merges them (mappings
// merge key by key, scalars and lists replace, null resets a key to its
// default), applies the overrides that match facts, fills defaults and
// validates. The error is a *ConfigError naming every problem with its file.
//
// A missing main file is fine when drop-ins exist. With no file at all the
// result is DefaultConfig() with an error (errors.Is ErrNoConfig) that says
// what the defaults lack: vSwitches and security groups have no defaults.
// On any other error the returned Config is the zero value.
func LoadConfig(src ConfigSource, facts NodeFacts) (Config, error) {
	files, problems := configFiles(src)
	fatal := len(problems) > 0
	var docs []document
	for _, f := range files {
		// A FIFO or /dev/zero here would block or grow the agent without
		// bound: read non-blocking, regular files only, at most the limit.
		data, err := fileread.Read(f, maxConfigSize, fileread.Follow)
		if err != nil {
			problems = append(problems, Problem{File: f, Message: fmt.Sprintf("cannot read: %v", unwrapPath(err))})
			fatal = true
			continue
		}
		doc, ps := parseDocument(f, data)
		problems = append(problems, ps...)
		if doc.body == nil {
			fatal = true
		}
		docs = append(docs, doc)
	}
	if fatal {
		// A file that could not be read or parsed may hold anything;
		// judging the rest without it would report false problems.
		return Config{}, &ConfigError{Problems: problems}
	}
	if len(docs) == 0 {
		cfg := DefaultConfig()
		ps := cfg.problems()
		ps = append([]Problem{{Message: fmt.Sprintf("no config: neither %s nor any %s/*.yaml exists; write one (see examples/config/minimal.yaml)", src.Main, src.DropInDir)}}, ps...)
		return cfg, &ConfigError{Problems: ps, NoFiles: true}
	}
	return build(docs, facts, problems)
}

// ParseConfig reads one config document with the same rules as LoadConfig
// (it is the whole config: defaults fill what it leaves out). Problems carry
// no file name; the caller knows it.
func ParseConfig(data []byte, facts NodeFacts) (Config, error) {
	doc, ps := parseDocument("", data)
	if doc.body == nil {
		return Config{}, &ConfigError{Problems: ps}
	}
	return build([]document{doc}, facts, ps)
}

// configFiles lists the main file (when it exists) and the drop-ins in
// lexical order. Hidden names are skipped: kubelet's ConfigMap volumes keep
// their real files under "..data" and "..<timestamp>", and editors leave
// dot-files behind.
func configFiles(src ConfigSource) ([]string, []Problem) {
	var files []string
	var problems []Problem
	if src.Main != "" {
		switch st, err := os.Stat(src.Main); {
		case err == nil && st.IsDir():
			problems = append(problems, Problem{File: src.Main, Message: "is a directory, want a YAML file"})
		case err == nil:
			files = append(files, src.Main)
		case !errors.Is(err, fs.ErrNotExist):
			problems = append(problems, Problem{File: src.Main, Message: fmt.Sprintf("cannot read: %v", unwrapPath(err))})
		}
	}
	if src.DropInDir == "" {
		return files, problems
	}
	entries, err := os.ReadDir(src.DropInDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		problems = append(problems, Problem{File: src.DropInDir, Message: fmt.Sprintf("cannot list drop-ins: %v", unwrapPath(err))})
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".yaml") {
			continue
		}
		p := filepath.Join(src.DropInDir, n)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		files = append(files, filepath.Join(src.DropInDir, n))
	}
	return files, problems
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parseDocument converts one YAML file to generic values and checks its
// syntax and schema: header, unknown keys, value types, override bodies.
func parseDocument(file string, data []byte) (document, []Problem) {
	doc := document{file: file}
	fail := func(format string, args ...any) (document, []Problem) {
		return doc, []Problem{{File: file, Message: fmt.Sprintf(format, args...)}}
	}
	if len(data) > maxConfigSize {
		return fail("file is %d bytes, more than the %d allowed", len(data), maxConfigSize)
	}
	if multiDocument(data) {
		return fail("holds more than one YAML document (---); put each drop-in in its own file")
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fail("not valid YAML: %s", yamlMessage(err))
	}
	v, err := decodeGeneric(j)
	if err != nil {
		return fail("%v", err)
	}
	body, ok := v.(map[string]any)
	if !ok {
		return fail("must be a YAML mapping with apiVersion: %s and kind: %s (got %s)", ConfigAPIVersion, ConfigKind, describe(v))
	}
	doc.body = body
	var ps []Problem
	for _, h := range []struct{ key, want string }{{"apiVersion", ConfigAPIVersion}, {"kind", ConfigKind}} {
		switch got, ok := body[h.key].(string); {
		case body[h.key] == nil:
			ps = append(ps, Problem{File: file, Path: h.key, Message: fmt.Sprintf("required: every config file starts with %s: %s", h.key, h.want)})
		case !ok || got != h.want:
			ps = append(ps, Problem{File: file, Path: h.key, Message: fmt.Sprintf("must be %q (got %s)", h.want, describe(body[h.key]))})
		}
	}
	var scratch Config
	d := &strictDecoder{}
	d.decode("", body, reflect.ValueOf(&scratch).Elem())
	d.problems = append(d.problems, overrideBodyProblems(scratch.Overrides)...)
	for _, p := range d.problems {
		p.File = file
		ps = append(ps, p)
	}
	return doc, ps
}

// yamlMessage puts the YAML library's error on one line without its
// prefixes: "line 4: key "pool" already set in map".
func yamlMessage(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	for _, p := range []string{"error converting YAML to JSON: ", "yaml: ", "unmarshal errors: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// maxConfigSize bounds one config file; real ones are a few KiB.
const maxConfigSize = 1 << 20

// multiDocument reports whether a YAML stream holds a second document, which
// YAML-to-JSON conversion would silently drop.
func multiDocument(data []byte) bool {
	content := false
	for _, line := range strings.Split(string(data), "\n") {
		t := strings.TrimRight(line, " \t\r")
		if t == "---" || strings.HasPrefix(t, "--- ") {
			if content {
				return true
			}
			continue
		}
		if s := strings.TrimSpace(t); s != "" && !strings.HasPrefix(s, "#") {
			content = true
		}
	}
	return false
}

// build merges parsed documents, applies overrides, fills defaults and
// validates. schema holds the documents' own problems (unknown keys, bad
// types); validation problems at or under those paths are left out, since
// they would only repeat them.
func build(docs []document, facts NodeFacts, schema []Problem) (Config, error) {
	merged := map[string]any{}
	origin := map[string]string{}
	for _, d := range docs {
		mergeInto(merged, d.body, "", d.file, origin)
	}
	var overrides []Override
	if raw, ok := merged["overrides"]; ok {
		d := &strictDecoder{}
		d.decode("overrides", raw, reflect.ValueOf(&overrides).Elem())
	}
	for i, o := range overrides {
		if !o.Match.Matches(facts) {
			continue
		}
		body, err := decodeGeneric(o.Config)
		m, ok := body.(map[string]any)
		if err != nil || !ok {
			continue // reported by parseDocument
		}
		for _, k := range []string{"apiVersion", "kind", "overrides"} {
			delete(m, k) // not allowed in an override; reported by parseDocument
		}
		src := fmt.Sprintf("overrides[%d]", i)
		if f := origin["overrides"]; f != "" {
			src = f + " " + src
		}
		mergeInto(merged, m, "", src, origin)
	}
	cfg := DefaultConfig()
	d := &strictDecoder{}
	d.decode("", merged, reflect.ValueOf(&cfg).Elem())
	ps := slices.Clone(schema)
	if len(schema) == 0 {
		// The documents decoded cleanly, so only an override can have
		// put a bad value in the merged config.
		ps = append(ps, d.problems...)
	}
	for _, p := range cfg.problems() {
		if !coveredBy(p.Path, ps) {
			ps = append(ps, p)
		}
	}
	if len(ps) > 0 {
		for i := range ps {
			if ps[i].File == "" {
				ps[i].File = lookupOrigin(origin, ps[i].Path)
			}
		}
		return Config{}, &ConfigError{Problems: ps}
	}
	return cfg, nil
}
