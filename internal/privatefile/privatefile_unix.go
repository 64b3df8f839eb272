//go:build unix

package privatefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Dir checks that dir is a directory (not a symbolic link) of the
// effective user, closed to group and others; what names it in errors
// ("secrets directory"). create makes it (0700, and its parents) when it
// does not exist; otherwise a missing dir is an error satisfying
// errors.Is(err, fs.ErrNotExist).
func Dir(dir, what string, create bool) error {
	if create {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return fmt.Errorf("making the directory above the %s: %w", what, err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("making the %s: %w", what, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("the %s %s: %w", what, dir, fs.ErrNotExist)
		}
		return fmt.Errorf("the %s %s: %w", what, dir, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return refuse(Insecure, dir, "the %s %s is a symbolic link: remove it (agentkernel makes the directory itself)", what, dir)
	default:
		return refuse(Insecure, dir, "the %s %s is not a directory: move it aside", what, dir)
	}
	return CheckOwner(dir, what, &st, "700")
}

// CheckOwner refuses st (path's, what names it) when it is not the effective user's or has
// permission bits for group or others.
func CheckOwner(path, what string, st *unix.Stat_t, mode string) error {
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return refuse(Insecure, path, "the %s %s is owned by uid %d, not by you (uid %d): if you made it, run chown %d %s; if you did not, remove it",
			what, path, st.Uid, uid, uid, path)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		return refuse(Insecure, path, "the %s %s is open to group or others (mode %04o): run chmod %s %s", what, path, perm, mode, path)
	}
	return nil
}

// Read reads path, which must be a regular file (not a symbolic link,
// not a FIFO) of the effective user closed to group and others, of at
// most max bytes; what names it in errors ("secrets vault"). A missing
// file is an error satisfying errors.Is(err, fs.ErrNotExist).
func Read(path, what string, max int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("the %s %s: %w", what, path, fs.ErrNotExist)
	case errors.Is(err, unix.ELOOP):
		return nil, refuse(Insecure, path, "the %s %s is a symbolic link: replace it with the file itself", what, path)
	case err != nil:
		return nil, fmt.Errorf("opening the %s %s: %w", what, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("the %s %s: %w", what, path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, refuse(Insecure, path, "the %s %s is not a regular file: move it aside", what, path)
	}
	if err := CheckOwner(path, what, &st, "600"); err != nil {
		return nil, err
	}
	if st.Size > max {
		return nil, refuse(TooLarge, path, "the %s %s is %d bytes, larger than any agentkernel writes", what, path, st.Size)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading the %s %s: %w", what, path, err)
	}
	if int64(len(b)) > max {
		return nil, refuse(TooLarge, path, "the %s %s is larger than any agentkernel writes", what, path)
	}
	return b, nil
}
