package mcp

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Host directories named by tool arguments (sandbox_run's cwd) are
// confined: a call may name the server's project directory (Options.Dir)
// or a directory below it, or one of [mcp] allowed_dirs of the server's
// own configuration (Options.AllowedDirs) or below it; never "/". The
// roots are resolved once, when the server starts (resolveRoots); a
// requested directory is compared with them after filepath.Clean and
// filepath.EvalSymlinks, so a symbolic link in the project that points
// elsewhere, "project/../..", and a link to an allowed directory's parent
// do not pass.
//
// Without this, a client could name any host directory (cwd "/etc" under
// the permissive profile mounts /etc read-write at /workspace). The list
// comes from the configuration the server loaded for its own project
// directory and the user's file, never from an agentkernel.toml in the
// requested directory: a hostile project could list "/etc" there. (No
// other setting of such a file is read either: the server's configuration
// governs every call.)
//
// The path checked is the path mounted: policy.Resolve resolves the
// directory again when it makes the spec, and checkMounts compares the
// spec's workspace source, free of symbolic links, with the roots by
// plain prefix, so a directory swapped for a link between confine and
// Resolve is refused. The backend then opens that source without
// following any symbolic link (native: openVolumeSource), so a swap after
// the check fails the run instead of mounting what the link points at.

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
	if t.within(real) {
		return real, nil
	}
	where := ""
	if real != filepath.Clean(dir) {
		where = " (it resolves to " + real + ")"
	}
	return refuse("outside the directories this MCP server may use%s: %s", where, t.rule())
}

// checkMounts refuses a spec whose /workspace source is outside the
// roots. The source is what the backend mounts (policy resolved its
// symbolic links), so the comparison is by plain prefix.
func (t *tools) checkMounts(spec *sandbox.Spec) error {
	for _, m := range spec.Mounts {
		if m.Dest != policy.WorkspaceDir || m.Kind == sandbox.MountTmpfs {
			continue
		}
		if !filepath.IsAbs(m.Source) || !t.within(filepath.Clean(m.Source)) {
			return fmt.Errorf("the directory to mount at %s is now %s, outside the directories this MCP server may use "+
				"(was a directory replaced by a symbolic link?): %s", policy.WorkspaceDir, m.Source, t.rule())
		}
	}
	return nil
}

// within reports whether the clean, resolved path p is a root or below
// one.
func (t *tools) within(p string) bool {
	if p == string(filepath.Separator) {
		return false
	}
	for _, root := range t.roots {
		if p == root || strings.HasPrefix(p, root+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// rule says which directories a call may name and where to allow more.
func (t *tools) rule() string {
	list := allowedList(t.opts.AllowedDirs)
	if t.cfg != nil && t.cfg.IsSet("mcp.allowed_dirs") {
		list += ", set in " + t.cfg.Source("mcp.allowed_dirs").String()
	}
	project := filepath.Join(t.opts.Dir, config.FileName)
	user := config.UserPath(os.Getenv)
	if t.cfg != nil {
		for _, s := range t.cfg.Loaded {
			switch s.Kind {
			case config.SourceProject:
				project = s.Path
			case config.SourceUser:
				user = s.Path
			}
		}
	}
	if user == "" {
		user = "~/.config/agentkernel/config.toml"
	}
	return fmt.Sprintf("its project directory %s and what is below it, and the directories in [mcp] allowed_dirs of "+
		"the server's own configuration (%s). To allow a directory, add it to [mcp] allowed_dirs in %s or in %s "+
		"and restart the server", t.opts.Dir, list, project, user)
}

// resolveRoots resolves the project directory and the allowed
// directories once. One that cannot be resolved, and "/", allow nothing:
// an allowed directory dropped so is named in a warning.
func resolveRoots(dir string, allowed []string, warn func(string, ...any)) []string {
	var out []string
	for i, d := range append([]string{dir}, allowed...) {
		what := "[mcp] allowed_dirs entry"
		if i == 0 {
			what = "the project directory"
		}
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) || strings.ContainsRune(d, 0) {
			warn("MCP server: %s %q is not an absolute path: no tool call may name it", what, d)
			continue
		}
		r, err := filepath.EvalSymlinks(filepath.Clean(d))
		if err != nil {
			warn("MCP server: %s %s cannot be used (%v): no tool call may name it; restart the server once it exists", what, d, errText(err))
			continue
		}
		if r == string(filepath.Separator) {
			if i > 0 {
				warn("MCP server: %s %s is the host's root directory, which is never allowed", what, d)
			}
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
