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

// pending is one file's prepared change: its content before (old, when
// it existed) and after.
type pending struct {
	path    string
	old     []byte
	existed bool
	mode    os.FileMode
	content []byte
}

// undo is what commit did to one file, for rollback.
type undo struct {
	w *pending
	// wrote: the file was replaced or created.
	wrote bool
	// backup is the .bak made, "" for none.
	backup string
	// dirs are the directories made for the file, deepest first.
	dirs []string
}

// commit writes w.content to w.path atomically (temp file in the same
// directory, fsync, rename), first copying an existing file to path.bak
// when no backup exists yet. What it did, also when it fails on the way,
// is in the undo it returns.
func (w *pending) commit() (*undo, error) {
	u := &undo{w: w}
	dir := filepath.Dir(w.path)
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) || filepath.Dir(d) == d {
			break
		}
		u.dirs = append(u.dirs, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return u, err
	}
	if w.existed {
		bak := w.path + ".bak"
		if _, err := os.Lstat(bak); errors.Is(err, fs.ErrNotExist) {
			if err := atomicfile.WriteFile(bak, w.old, w.mode); err != nil {
				return u, fmt.Errorf("backup: %w", err)
			}
			u.backup = bak
		}
	}
	if err := atomicfile.WriteFile(w.path, w.content, w.mode); err != nil {
		return u, err
	}
	u.wrote = true
	return u, nil
}

// rollback puts back what commit did: the file's old content (or no
// file), no backup, none of the directories it made.
func (u *undo) rollback() error {
	var errs []error
	if u.wrote {
		if u.w.existed {
			errs = append(errs, atomicfile.WriteFile(u.w.path, u.w.old, u.w.mode))
		} else if err := os.Remove(u.w.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if u.backup != "" {
		if err := os.Remove(u.backup); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, d := range u.dirs {
		_ = os.Remove(d) // left when something else was put there since
	}
	return errors.Join(errs...)
}

// commitAll writes every prepared change of cs, in order, filling in
// their backups. When one fails, those already written are rolled back
// (last first), so that either every file is written or none is.
func commitAll(cs []Change) error {
	var done []*undo
	for i := range cs {
		w := cs[i].write
		if w == nil {
			continue
		}
		u, err := w.commit()
		done = append(done, u)
		if err != nil {
			err = fmt.Errorf("%s: %w", w.path, err)
			var rerrs []error
			for j := len(done) - 1; j >= 0; j-- {
				if rerr := done[j].rollback(); rerr != nil {
					rerrs = append(rerrs, fmt.Errorf("%s: %w", done[j].w.path, rerr))
				}
			}
			if len(rerrs) > 0 {
				return fmt.Errorf("%w; rolling back the files written before it also failed: %w", err, errors.Join(rerrs...))
			}
			return fmt.Errorf("%w (the files written before it were restored)", err)
		}
		cs[i].Backup = u.backup
	}
	return nil
}

// writeOwnFile prepares a file whose whole content is ours (a skill, a
// command, a plugin; Install commits it): created when missing, left
// alone when identical, replaced only with --force when it differs.
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
	c.write = &pending{path: path, old: old, existed: existed, mode: mode, content: []byte(content)}
	return c, nil
}

func lines(s string) int {
	return strings.Count(strings.TrimSuffix(s, "\n"), "\n") + 1
}
