package image

import (
	"io/fs"
	"os"
	"path/filepath"
)

// writeFileAtomic writes data to path through a synced temporary file in
// the same directory and a rename, so readers see the old or the new
// content, never a mix, and a crash leaves one of the two.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		if err = f.Chmod(perm); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that a rename into it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

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
