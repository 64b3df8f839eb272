package mcp

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Host directories named by tool arguments (sandbox_run's cwd) are
// confined: a call may name the server's project directory (Options.Dir)
// or a directory below it, or one of [mcp] allowed_dirs of the server's
// own configuration (Options.AllowedDirs) or below it; never "/". Both
// sides are compared after filepath.Clean and filepath.EvalSymlinks, so
// a symbolic link in the project that points elsewhere, "project/../..",
// and a link to an allowed directory's parent do not pass. The resolved
// path is what the sandbox then mounts.
//
// Without this, a client could name any host directory (cwd "/etc" under
// the permissive profile mounts /etc read-write at /workspace). The list
// comes from the configuration the server loaded for its own project
// directory and the user's file, never from an agentkernel.toml in the
// requested directory: a hostile project could list "/etc" there.

// confine checks the host directory dir that argument arg names and
// returns it resolved.
func (t *tools) confine(arg, dir string) (string, error) {
	refuse := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("%s %q: %s", arg, dir, fmt.Sprintf(format, args...))
	}
	switch {
	case strings.ContainsRune(dir, 0):
		return refuse("contains a NUL byte")
	case !filepath.IsAbs(dir):
		return refuse("must be an absolute host path")
	}
	for _, el := range strings.Split(filepath.ToSlash(dir), "/") {
		if el == ".." {
			return refuse("must not contain \"..\": name the directory itself")
		}
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(dir))
	if err != nil {
		return refuse("not a directory (%v)", errText(err))
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return refuse("not a directory")
	}
	if real == string(filepath.Separator) {
		return refuse("the host's root directory is never allowed")
	}
	for _, root := range t.roots() {
		if real == root || strings.HasPrefix(real, root+string(filepath.Separator)) {
			return real, nil
		}
	}
	where := ""
	if real != filepath.Clean(dir) {
		where = " (it resolves to " + real + ")"
	}
	return refuse("outside the directories this MCP server may use%s: its project directory %s and what is below it, "+
		"and the directories in [mcp] allowed_dirs of its configuration (%s). To allow it, add the directory to allowed_dirs "+
		"in %s or in the user's ~/.config/agentkernel/config.toml and restart the server",
		where, t.opts.Dir, allowedList(t.opts.AllowedDirs), filepath.Join(t.opts.Dir, "agentkernel.toml"))
}

// roots are the directories a call may name (with what is below them),
// resolved; those that do not exist, and "/", allow nothing.
func (t *tools) roots() []string {
	var out []string
	for _, d := range append([]string{t.opts.Dir}, t.opts.AllowedDirs...) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		r, err := filepath.EvalSymlinks(filepath.Clean(d))
		if err != nil || r == string(filepath.Separator) {
			continue
		}
		out = append(out, r)
	}
	return out
}

func allowedList(dirs []string) string {
	if len(dirs) == 0 {
		return "none"
	}
	return strings.Join(dirs, ", ")
}

// errText is err's message without the "lstat PATH:" prefix of an
// *os.PathError, since the message names the path already.
func errText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
