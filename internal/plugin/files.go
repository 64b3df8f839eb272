package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
)

// readExisting returns a file's content, whether it exists, and its mode.
func readExisting(path string) ([]byte, bool, os.FileMode, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, 0o644, nil
	}
	if err != nil {
		return nil, false, 0, err
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	return b, true, mode, nil
}

// commit writes content to path atomically (temp file in the same
// directory, fsync, rename), first copying an existing file to path.bak
// when no backup exists yet. It returns the backup's path when it made
// one.
func commit(path string, old []byte, existed bool, mode os.FileMode, content []byte) (string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	backup := ""
	if existed {
		bak := path + ".bak"
		if _, err := os.Lstat(bak); errors.Is(err, fs.ErrNotExist) {
			if err := atomicfile.WriteFile(bak, old, mode); err != nil {
				return "", fmt.Errorf("backup: %w", err)
			}
			backup = bak
		}
	}
	return backup, atomicfile.WriteFile(path, content, mode)
}

// writeOwnFile installs a file whose whole content is ours (a skill, a
// command, a plugin): created when missing, left alone when identical,
// replaced only with --force when it differs.
func writeOwnFile(path, content string, o *Options) (Change, error) {
	old, existed, mode, err := readExisting(path)
	if err != nil {
		return Change{}, err
	}
	c := Change{Path: path}
	switch {
	case existed && bytes.Equal(old, []byte(content)):
		c.Action = Unchanged
		return c, nil
	case existed && !o.Force:
		c.Action, c.Detail = Skipped, "exists with other content (use --force to overwrite)"
		return c, nil
	case existed:
		c.Action = Replaced
		c.Diff = fmt.Sprintf("- %d lines (yours)\n+ %d lines (agentkernel's)", lines(string(old)), lines(content))
	default:
		c.Action = Created
		c.Diff = fmt.Sprintf("+ %d lines", lines(content))
	}
	if o.DryRun {
		return c, nil
	}
	c.Backup, err = commit(path, old, existed, mode, []byte(content))
	return c, err
}

func lines(s string) int {
	return strings.Count(strings.TrimSuffix(s, "\n"), "\n") + 1
}
