// Package templates finds, lists and stores templates: agentkernel.toml
// documents a sandbox starts from ('--template NAME' on 'run' and
// 'sandbox create'). Built-ins are embedded; local ones live in
// <data-dir>/templates/<name>.toml and hide a built-in of the same name.
// A template is a configuration layer above the user's file and below the
// project's agentkernel.toml and the flags (config.LoadOptions.Template),
// and may not set what only trusted configuration sets
// (config.ParseTemplate).
package templates

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentkernel/agentkernel/internal/config"
)

//go:embed builtin/*.toml
var builtinFS embed.FS

// Where a template comes from.
const (
	SourceBuiltin = "built-in"
	SourceLocal   = "local"
	SourceFile    = "file"
	SourceGitHub  = "github"
)

// Template is one template's document and where it was found.
type Template struct {
	// Name is the template's name, or the path or specifier it was asked
	// for by when it is a file or a github template.
	Name string `json:"name"`
	// Source is SourceBuiltin, SourceLocal, SourceFile or SourceGitHub.
	Source string `json:"source"`
	// Path is the file it was read from ("" for a built-in).
	Path string `json:"path,omitempty"`
	// Image is its [sandbox] base_image, else its runtime ("" if neither).
	Image string `json:"image"`
	// Data is the TOML document.
	Data []byte `json:"-"`
}

// Layer is the template as a configuration layer for config.Load.
func (t *Template) Layer() *config.TemplateLayer {
	return &config.TemplateLayer{Label: t.label(), Data: t.Data}
}

func (t *Template) label() string {
	if t.Path != "" {
		return t.Path
	}
	return t.Name
}

// ErrBuiltin is the removal of a built-in template.
var ErrBuiltin = errors.New("built-in templates cannot be removed")

// ErrGitHubOffline is a github: template: this build fetches nothing.
var ErrGitHubOffline = errors.New("github templates need network access to raw.githubusercontent.com; download the file and pass its path")

// NotFoundError is a template that is neither a file, a local nor a
// built-in template.
type NotFoundError struct {
	Name    string
	Similar []string // names that look like it
}

func (e *NotFoundError) Error() string {
	msg := fmt.Sprintf("template %q not found", e.Name)
	if len(e.Similar) > 0 {
		msg += " (did you mean " + strings.Join(e.Similar, ", ") + "?)"
	}
	return msg
}

// Dir is where local templates live under dataDir.
func Dir(dataDir string) string { return filepath.Join(dataDir, "templates") }

// ValidateName applies the sandbox name rule to a template's name: it
// becomes a file name, so no path separators or dots.
func ValidateName(name string) error {
	if err := config.ValidateSandboxName(name); err != nil {
		return errors.New(strings.Replace(err.Error(), "sandbox name", "template name", 1))
	}
	return nil
}

// BuiltinNames lists the built-in templates, sorted.
func BuiltinNames() []string {
	ents, _ := fs.ReadDir(builtinFS, "builtin")
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".toml"))
	}
	sort.Strings(names)
	return names
}

// Builtin returns the built-in template name, if there is one.
func Builtin(name string) (*Template, bool) {
	data, err := builtinFS.ReadFile("builtin/" + name + ".toml")
	if err != nil || ValidateName(name) != nil {
		return nil, false
	}
	t := &Template{Name: name, Source: SourceBuiltin, Data: data}
	t.Image = imageOf(data, name)
	return t, true
}

// Resolve finds the template spec names, in this order: a file (spec
// contains '/' or ends in .toml, and exists), a local template in
// dataDir, a built-in, a github:OWNER/REPO/PATH specifier (refused: see
// ErrGitHubOffline). The document is validated (config.ParseTemplate).
func Resolve(spec, dataDir string) (*Template, error) {
	if strings.HasPrefix(spec, "github:") {
		return nil, fmt.Errorf("template %q: %w", spec, ErrGitHubOffline)
	}
	if strings.Contains(spec, "/") || strings.HasSuffix(spec, ".toml") {
		if st, err := os.Stat(spec); err == nil && !st.IsDir() {
			t, err := readFile(spec, spec, SourceFile)
			if err != nil {
				return nil, err
			}
			return t, nil
		}
		return nil, fmt.Errorf("template file %s not found", spec)
	}
	if err := ValidateName(spec); err != nil {
		return nil, err
	}
	local := filepath.Join(Dir(dataDir), spec+".toml")
	if _, err := os.Lstat(local); err == nil {
		return readFile(local, spec, SourceLocal)
	}
	if t, ok := Builtin(spec); ok {
		if _, _, err := config.ParseTemplate(t.Data, t.label()); err != nil {
			return nil, err
		}
		return t, nil
	}
	all := BuiltinNames()
	if locals, err := localNames(dataDir); err == nil {
		all = append(all, locals...)
	}
	return nil, &NotFoundError{Name: spec, Similar: similar(spec, all)}
}

// readFile reads and validates the template file path.
func readFile(path, name, source string) (*Template, error) {
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	if _, _, err := config.ParseTemplate(data, path); err != nil {
		return nil, err
	}
	return &Template{Name: name, Source: source, Path: path, Image: imageOf(data, path), Data: data}, nil
}

// readLimited reads a regular file of at most config.MaxFileSize bytes.
func readLimited(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: template file not found", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() > config.MaxFileSize {
		return nil, fmt.Errorf("%s: template is too large (%d bytes; the limit is %d)", path, st.Size(), config.MaxFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > config.MaxFileSize {
		return nil, fmt.Errorf("%s: template is too large", path)
	}
	return data, nil
}

// imageOf is the document's base_image, else its runtime ("" when the
// document does not parse or sets neither).
func imageOf(data []byte, label string) string {
	c, _, err := config.ParseTemplate(data, label)
	if err != nil {
		return ""
	}
	if c.Sandbox.BaseImage != "" {
		return c.Sandbox.BaseImage
	}
	return c.Sandbox.Runtime
}

// localNames lists the local templates' names (files NAME.toml with a
// valid NAME), sorted.
func localNames(dataDir string) ([]string, error) {
	ents, err := os.ReadDir(Dir(dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".toml")
		if !ok || !e.Type().IsRegular() || ValidateName(n) != nil {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// List returns every template by name: the local ones and the built-ins
// they do not hide. A local template that does not parse is listed with
// no image.
func List(dataDir string) ([]*Template, error) {
	locals, err := localNames(dataDir)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []*Template
	for _, n := range locals {
		path := filepath.Join(Dir(dataDir), n+".toml")
		t := &Template{Name: n, Source: SourceLocal, Path: path}
		if data, err := readLimited(path); err == nil {
			t.Image = imageOf(data, path)
		}
		out = append(out, t)
		seen[n] = true
	}
	for _, n := range BuiltinNames() {
		if seen[n] {
			continue
		}
		t, _ := Builtin(n)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Save validates data as a template and writes it as the local template
// name. An existing local template of that name is an error unless
// force.
func Save(dataDir, name string, data []byte, force bool) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	if _, _, err := config.ParseTemplate(data, name); err != nil {
		return "", err
	}
	dir := Dir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".toml")
	if !force {
		if _, err := os.Lstat(path); err == nil {
			return "", fmt.Errorf("local template %q already exists (%s): remove it first with 'agentkernel template remove %s'", name, path, name)
		}
	}
	tmp, err := os.CreateTemp(dir, "."+name+"-*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

// Add copies the template file file, once validated, into the local
// templates as name.
func Add(dataDir, name, file string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	data, err := readLimited(file)
	if err != nil {
		return "", err
	}
	if _, _, err := config.ParseTemplate(data, file); err != nil {
		return "", err
	}
	return Save(dataDir, name, data, false)
}

// Remove deletes the local template name. A built-in is ErrBuiltin; a
// name that is neither is a *NotFoundError.
func Remove(dataDir, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	path := filepath.Join(Dir(dataDir), name+".toml")
	err := os.Remove(path)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, ok := Builtin(name); ok {
		return fmt.Errorf("template %q: %w", name, ErrBuiltin)
	}
	locals, _ := localNames(dataDir)
	return &NotFoundError{Name: name, Similar: similar(name, locals)}
}

// similar returns up to three of names that look like name: a prefix
// either way, or an edit distance of at most 2.
func similar(name string, names []string) []string {
	var out []string
	seen := map[string]bool{}
	ln := strings.ToLower(name)
	for _, n := range names {
		l := strings.ToLower(n)
		if seen[n] || l == ln {
			continue
		}
		if strings.HasPrefix(l, ln) || strings.HasPrefix(ln, l) || config.EditDistance(l, ln) <= 2 {
			out = append(out, n)
			seen[n] = true
		}
		if len(out) == 3 {
			break
		}
	}
	return out
}
