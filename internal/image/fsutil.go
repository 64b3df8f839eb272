package image

import (
	"io/fs"
	"os"
	"path/filepath"
)

// removeAll is os.RemoveAll that also copes with directories a layer made
// unwritable or unsearchable (mode 0555, 0000), which a rootless caller
// cannot otherwise empty.
func removeAll(path string) error {
	err := os.RemoveAll(path)
	if err == nil {
		return nil
	}
	// WalkDir calls fn on a directory before reading it, so making it
	// readable and searchable here lets the walk (and then RemoveAll) in.
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, werr error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}

// exists reports whether path exists (without following a final symlink).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
