//go:build unix

package secrets

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// checkDir checks that dir is a directory (not a symbolic link) of the
// effective user, closed to group and others. create makes it (0700, and
// the data directory above it) when it does not exist; otherwise a
// missing dir is an error satisfying errors.Is(err, fs.ErrNotExist).
func checkDir(dir string, create bool) error {
	if create {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return fmt.Errorf("making the data directory for secrets: %w", err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("making the secrets directory: %w", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("the secrets directory %s: %w", dir, fs.ErrNotExist)
		}
		return fmt.Errorf("the secrets directory %s: %w", dir, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return insecure(dir, fmt.Sprintf("the secrets directory %s is a symbolic link: remove it (agentkernel makes the directory itself)", dir))
	default:
		return insecure(dir, fmt.Sprintf("the secrets directory %s is not a directory: move it aside", dir))
	}
	return checkOwner(dir, "secrets directory", &st, "700")
}

// checkOwner refuses st when it is not the effective user's or has
// permission bits for group or others.
func checkOwner(path, what string, st *unix.Stat_t, mode string) error {
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return insecure(path, fmt.Sprintf("the %s %s is owned by uid %d, not by you (uid %d): if you made it, run chown %d %s; if you did not, remove it",
			what, path, st.Uid, uid, uid, path))
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		return insecure(path, fmt.Sprintf("the %s %s is open to group or others (mode %04o): run chmod %s %s", what, path, perm, mode, path))
	}
	return nil
}

func insecure(path, msg string) error {
	return &Error{Kind: ErrInsecure, Path: path, msg: msg}
}

// readPrivate reads path, which must be a regular file (not a symbolic
// link, not a FIFO) of the effective user closed to group and others,
// of at most max bytes (else an error of kind tooLarge). A missing file
// is an error satisfying errors.Is(err, fs.ErrNotExist).
func readPrivate(path, what string, max int64, tooLarge error) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("the secrets %s %s: %w", what, path, fs.ErrNotExist)
	case errors.Is(err, unix.ELOOP):
		return nil, insecure(path, fmt.Sprintf("the secrets %s %s is a symbolic link: replace it with the file itself", what, path))
	case err != nil:
		return nil, fmt.Errorf("opening the secrets %s %s: %w", what, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("the secrets %s %s: %w", what, path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, insecure(path, fmt.Sprintf("the secrets %s %s is not a regular file: move it aside", what, path))
	}
	if err := checkOwner(path, "secrets "+what, &st, "600"); err != nil {
		return nil, err
	}
	if st.Size > max {
		return nil, &Error{Kind: tooLarge, Path: path, msg: fmt.Sprintf("the secrets %s %s is %d bytes, larger than any agentkernel writes", what, path, st.Size)}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading the secrets %s %s: %w", what, path, err)
	}
	if int64(len(b)) > max {
		return nil, &Error{Kind: tooLarge, Path: path, msg: fmt.Sprintf("the secrets %s %s is larger than any agentkernel writes", what, path)}
	}
	return b, nil
}

// lockFile takes an exclusive flock on path (made 0600 if missing) and
// returns its release. flock locks belong to the open file, so two
// Vaults in one process exclude each other as two processes do.
func lockFile(path string) (func(), error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, insecure(path, fmt.Sprintf("the secrets lock file %s is a symbolic link: remove it", path))
	case err != nil:
		return nil, fmt.Errorf("opening the secrets lock file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("the secrets lock file %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, insecure(path, fmt.Sprintf("the secrets lock file %s is not a regular file: remove it", path))
	}
	if err := checkOwner(path, "secrets lock file", &st, "600"); err != nil {
		f.Close()
		return nil, err
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the secrets vault (%s): %w", path, err)
	}
	return func() { f.Close() }, nil
}
