package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"unicode/utf8"
)

// MaxFileSize caps how much of a configuration file is read; a larger
// file is an error, not a truncated read.
const MaxFileSize = 1 << 20

// LoadOptions says which files Load reads.
type LoadOptions struct {
	// Path is an explicit project file (--config). It must exist, and
	// Dir/agentkernel.toml is then not read.
	Path string
	// Dir is searched for agentkernel.toml when Path is empty; "" means
	// the current directory.
	Dir string
	// UserPath is the user-wide file; "" means UserPath(os.Getenv). A
	// missing user file is not an error.
	UserPath string
	// NoUserFile skips the user-wide file.
	NoUserFile bool
	// Template is a template's document ('--template'), applied above
	// the user file and below the project file; nil: none.
	Template *TemplateLayer
}

// UserPath returns the user-wide configuration file:
// $XDG_CONFIG_HOME/agentkernel/config.toml when XDG_CONFIG_HOME is an
// absolute path, else $HOME/.config/agentkernel/config.toml, else "".
func UserPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "agentkernel", "config.toml")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "agentkernel", "config.toml")
	}
	return ""
}

// Warning is a problem that does not stop a run (an unknown key).
type Warning struct {
	Path string `json:"path"`           // the file
	Line int    `json:"line,omitempty"` // 1-based; 0 when unknown
	Key  string `json:"key,omitempty"`  // the dotted key
	Msg  string `json:"message"`        // what is wrong, naming the key
}

// String renders "agentkernel.toml:7: unknown key "x" (ignored)".
func (w Warning) String() string { return location(w.Path, w.Line) + w.Msg }

// Error is a configuration file that cannot be used: unreadable, not
// TOML, a value of the wrong type or a bad value. Line is 1-based, 0 when
// the problem is the file as a whole.
type Error struct {
	Path string // the file
	Line int    // 1-based; 0 for the file as a whole
	// Key is the dotted key of the bad value ("" for syntax errors).
	Key string
	Msg string // what is wrong
	// Err is the underlying error, if any (e.g. from the file system).
	Err error
}

// Error renders "path:line: key: message".
func (e *Error) Error() string {
	if e.Key != "" {
		return location(e.Path, e.Line) + e.Key + ": " + e.Msg
	}
	return location(e.Path, e.Line) + e.Msg
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

func location(path string, line int) string {
	switch {
	case path == "":
		return ""
	case line > 0:
		return fmt.Sprintf("%s:%d: ", path, line)
	}
	return path + ": "
}

// allowDegradedKey is [security] allow_degraded, which only trusted
// configuration sets.
const allowDegradedKey = "security.allow_degraded"

// applyUser applies the user-wide file (opts.UserPath, else the default
// place; none with opts.NoUserFile).
func (c *Config) applyUser(opts LoadOptions) ([]Warning, error) {
	if opts.NoUserFile {
		return nil, nil
	}
	user := opts.UserPath
	if user == "" {
		user = UserPath(os.Getenv)
	}
	if user == "" {
		return nil, nil
	}
	return c.applyFile(user, SourceUser, false)
}

// Load reads the layers (defaults, user file, template, project file),
// validates the result and returns it with the warnings of every file
// read.
func Load(opts LoadOptions) (*Config, []Warning, error) {
	c := Defaults()
	warns, err := c.applyUser(opts)
	if err != nil {
		return nil, warns, err
	}
	if t := opts.Template; t != nil {
		if _, _, err := ParseTemplate(t.Data, t.Label); err != nil {
			return nil, warns, err
		}
		w, err := c.apply(t.Data, t.Label, SourceTemplate)
		warns = append(warns, w...)
		if err != nil {
			return nil, warns, err
		}
	}

	project, explicit := opts.Path, true
	if project == "" {
		dir := opts.Dir
		if dir == "" {
			dir = "."
		}
		project, explicit = filepath.Join(dir, FileName), false
	}
	userDegraded, userSource, userSet := slices.Clone(c.Security.AllowDegraded), c.Source(allowDegradedKey), c.IsSet(allowDegradedKey)
	w, err := c.applyFile(project, SourceProject, explicit)
	warns = append(warns, w...)
	if err != nil {
		return nil, warns, err
	}
	if !explicit && c.Source(allowDegradedKey).Kind == SourceProject {
		// A project's file may not weaken the sandbox it runs in: the
		// user's own value stands.
		s := c.Source(allowDegradedKey)
		warns = append(warns, Warning{Path: s.Path, Line: s.Line,
			Msg: "security.allow_degraded is ignored in a project's agentkernel.toml (set it in your user config, or pass the file with --config)"})
		c.Security.AllowDegraded = userDegraded
		if userSet {
			c.Sources[allowDegradedKey] = userSource
		} else {
			delete(c.Sources, allowDegradedKey)
		}
	}
	if err := c.validate(); err != nil {
		return nil, warns, err
	}
	return c, warns, nil
}

// Parse reads one project file's contents on top of the defaults and
// validates the result; path is only used in messages and Sources.
func Parse(data []byte, path string) (*Config, []Warning, error) {
	c := Defaults()
	warns, err := c.apply(data, path, SourceProject)
	if err != nil {
		return nil, warns, err
	}
	if err := c.validate(); err != nil {
		return nil, warns, err
	}
	return c, warns, nil
}

// applyFile reads path and applies it as layer kind. A missing file is
// skipped unless required.
func (c *Config) applyFile(path string, kind SourceKind, required bool) ([]Warning, error) {
	data, err := readFile(path, required)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return c.apply(data, path, kind)
}

// readFile reads at most MaxFileSize bytes. Files found by search must be
// regular files (opening a FIFO would block); an explicit path may be any
// readable file, such as /dev/stdin.
func readFile(path string, explicit bool) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &Error{Path: path, Msg: "config file not found", Err: err}
		}
		return nil, &Error{Path: path, Msg: "cannot read config file: " + errText(err), Err: err}
	}
	if st.IsDir() {
		return nil, &Error{Path: path, Msg: "is a directory, not a config file"}
	}
	if !explicit && !st.Mode().IsRegular() {
		return nil, &Error{Path: path, Msg: "not a regular file"}
	}
	if st.Mode().IsRegular() && st.Size() > MaxFileSize {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("config file is too large (%d bytes; the limit is %d)", st.Size(), MaxFileSize)}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Path: path, Msg: "cannot read config file: " + errText(err), Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &Error{Path: path, Msg: "cannot read config file: " + errText(err), Err: err}
	}
	if len(data) > MaxFileSize {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("config file is too large (more than %d bytes)", MaxFileSize)}
	}
	return data, nil
}

// errText is err's message without the "open PATH:" prefix of a
// *fs.PathError, since messages already name the path.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// checkText rejects binary input before the TOML parser sees it, so the
// user gets "this is not a text file" rather than a puzzling syntax error.
func checkText(data []byte, path string) error {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return &Error{Path: path, Line: lineAt(data, i), Msg: "not a TOML text file (contains a NUL byte)"}
	}
	if !utf8.Valid(data) {
		i := 0
		for i < len(data) {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return &Error{Path: path, Line: lineAt(data, i), Msg: "not a TOML text file (invalid UTF-8)"}
	}
	return nil
}

func lineAt(data []byte, off int) int {
	return bytes.Count(data[:off], []byte{'\n'}) + 1
}
