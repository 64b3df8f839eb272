// Package atomicfile replaces a file's whole content so that a reader
// sees the old content or the new, never a mix, and a crash leaves one
// of the two: a synced temporary file in the same directory, a rename,
// and a sync of the directory. Lock serialises the read-modify-write
// cycles of several processes on such files.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, mode perm. The temporary file
// (".<name>.tmp-*" beside it) is removed on failure.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
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
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so that a rename into it is durable.
func SyncDir(dir string) error {
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
