package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The operations below serve file protocols that work on a file in place
// (SFTP): a directory made or renamed, a file written without being
// truncated, its mode, size or times changed. Each resolves its paths as
// the others do (openat2 below Root, RESOLVE_IN_ROOT in the sandbox),
// acts on the last component through its parent's descriptor, never
// following a link there, and refuses what lies on a kernel filesystem.

// parent opens the directory holding rel (O_PATH, checked) and returns
// it with rel's last component.
func (f *FS) parent(p string) (int, string, error) {
	rel, err := f.Clean(p)
	if err != nil {
		return -1, "", err
	}
	if rel == "" {
		return -1, "", fmt.Errorf("%s: %w", p, ErrRefused)
	}
	dir, base := path.Split(rel)
	pfd, st, err := f.lookup(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return -1, "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(pfd)
		return -1, "", fmt.Errorf("%s: %w", p, unix.ENOTDIR)
	}
	// O_PATH descriptors cannot be used for *at calls that modify the
	// directory: open it for real (same inode).
	d, err := reopen(pfd, unix.O_RDONLY|unix.O_DIRECTORY)
	unix.Close(pfd)
	if err != nil {
		return -1, "", err
	}
	fd, err := unix.Dup(int(d.Fd()))
	d.Close()
	if err != nil {
		return -1, "", err
	}
	unix.CloseOnExec(fd)
	return fd, base, nil
}

// Mkdir creates directory p (its parent must exist), owned by UID/GID.
func (f *FS) Mkdir(p string, mode uint32) error {
	pfd, base, err := f.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if mode == 0 {
		mode = 0o755
	}
	if err := unix.Mkdirat(pfd, base, mode&0o1777); err != nil {
		return err
	}
	if f.UID >= 0 {
		_ = unix.Fchownat(pfd, base, f.UID, f.GID, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// Rename moves oldp to newp, both resolved inside the root; the last
// components themselves are moved and replaced, never what a link
// points at.
func (f *FS) Rename(oldp, newp string) error {
	ofd, obase, err := f.parent(oldp)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, nbase, err := f.parent(newp)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	return unix.Renameat(ofd, obase, nfd, nbase)
}

// Lstat describes p itself (a link is described, not followed; its
// parents are resolved inside the root).
func (f *FS) Lstat(p string) (Entry, error) {
	pfd, base, err := f.parent(p)
	if err != nil {
		if rel, cerr := f.Clean(p); cerr == nil && rel == "" {
			return f.Stat(p)
		}
		return Entry{}, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, err
	}
	e := entry(base, &st)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		e.Link, _ = readlinkat(pfd, base)
	}
	return e, nil
}

// OpenWrite opens the existing regular file p for writing in place (no
// truncation), following links inside the root.
func (f *FS) OpenWrite(p string) (*os.File, error) { return f.openRegular(p, unix.O_WRONLY) }

// SetAttr changes what is set of p's permission bits (mode >= 0), size
// (size >= 0, regular files only) and times (non-zero), following links
// inside the root.
func (f *FS) SetAttr(p string, mode int64, size int64, atime, mtime time.Time) error {
	rel, err := f.Clean(p)
	if err != nil {
		return err
	}
	fd, st, err := f.lookup(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	kind := st.Mode & unix.S_IFMT
	if kind != unix.S_IFREG && kind != unix.S_IFDIR {
		return fmt.Errorf("%s: not a regular file or directory: %w", p, ErrRefused)
	}
	// The O_PATH descriptor's magic link names the same inode; nothing
	// here resolves a path the sandbox controls.
	proc := fmt.Sprintf("/proc/self/fd/%d", fd)
	var errs []error
	if mode >= 0 {
		errs = append(errs, unix.Chmod(proc, uint32(mode)&0o7777))
	}
	if size >= 0 {
		if kind != unix.S_IFREG {
			errs = append(errs, fmt.Errorf("%s: %w", p, unix.EISDIR))
		} else {
			errs = append(errs, unix.Truncate(proc, size))
		}
	}
	if !atime.IsZero() || !mtime.IsZero() {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if !atime.IsZero() {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if !mtime.IsZero() {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		errs = append(errs, unix.UtimesNanoAt(unix.AT_FDCWD, proc, ts, 0))
	}
	return errors.Join(errs...)
}
