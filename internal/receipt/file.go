package receipt

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// maxFile bounds what Load reads of a receipt file.
const maxFile = 16 << 20

// Write writes r to path, 0600, replacing a regular file there (through a
// new file renamed over it) but never a symbolic link, a directory or
// anything else; path's directory is made (0700) when missing.
func Write(path string, r *Receipt) error {
	data, err := Marshal(r)
	if err != nil {
		return fmt.Errorf("receipt %s: %w", path, err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("receipt %s: is a symbolic link, which is not followed; name another file", path)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("receipt %s: exists and is not a regular file", path)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("receipt %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("receipt %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".receipt-*")
	if err != nil {
		return fmt.Errorf("receipt %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("receipt %s: %w", path, err)
	}
	return nil
}

// Load reads and parses the receipt file at path. A file that cannot be
// read, or is not a receipt, is ErrBadInput.
func Load(path string) (*Receipt, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadInput, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadInput, path, err)
	}
	if len(data) > maxFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadInput, path, maxFile)
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
