package agent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// FS does file operations below a root directory descriptor without ever
// resolving a path outside it. Every path is resolved by openat2(2):
//
//   - InSandbox (the agent, whose own root is the sandbox's): paths resolve
//     with RESOLVE_IN_ROOT, so absolute symlinks and ".." stay inside, and
//     RESOLVE_NO_MAGICLINKS, so /proc/<pid>/fd and /proc/<pid>/root links
//     are refused; /proc, /sys and /dev, and anything on a proc, sysfs,
//     cgroup or devpts filesystem, are refused too.
//   - otherwise (the CLI extracting into a host directory): RESOLVE_BENEATH
//     with RESOLVE_NO_SYMLINKS: nothing the sandbox sent can make a write
//     follow a link.
//
// Files are opened as O_PATH first, checked (regular file, allowed
// filesystem) and only then reopened for reading or writing, so a FIFO,
// device or kernel file is never opened for I/O.
type FS struct {
	Root      int
	InSandbox bool
	// UID and GID own what FS creates; -1 leaves the creator's.
	UID, GID int
}

func (f *FS) resolve() uint64 {
	if f.InSandbox {
		return unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	}
	return unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
}

// ErrRefused is returned for paths that file operations may not touch.
var ErrRefused = errors.New("path not allowed")

// Clean turns p into a root-relative path ("" is the root itself). In
// the sandbox, /proc, /sys and /dev are refused.
func (f *FS) Clean(p string) (string, error) {
	c := path.Clean("/" + p)
	if f.InSandbox {
		for _, d := range []string{"/proc", "/sys", "/dev"} {
			if c == d || strings.HasPrefix(c, d+"/") {
				return "", fmt.Errorf("%s: %w", p, ErrRefused)
			}
		}
	}
	return strings.TrimPrefix(c, "/"), nil
}

func (f *FS) openat2(rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(f.Root, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: f.resolve()})
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

// special reports whether fd lives on a kernel filesystem.
func special(fd int) bool {
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) != nil {
		return true
	}
	switch uint32(st.Type) { // Type is 32 bits wide on 32-bit systems
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC,
		unix.DEVPTS_SUPER_MAGIC, unix.SECURITYFS_MAGIC, unix.DEBUGFS_MAGIC, unix.TRACEFS_MAGIC,
		unix.BPF_FS_MAGIC, unix.NSFS_MAGIC, unix.BINFMTFS_MAGIC:
		return true
	}
	return false
}

// lookup opens rel as O_PATH and checks where it landed.
func (f *FS) lookup(rel string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := f.openat2(rel, unix.O_PATH)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	if f.InSandbox && special(fd) {
		unix.Close(fd)
		return -1, st, fmt.Errorf("/%s: %w", rel, ErrRefused)
	}
	return fd, st, nil
}

// reopen opens an O_PATH descriptor for I/O (same inode).
func reopen(fd int, flags int) (*os.File, error) {
	nfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), "file"), nil
}

// Open opens the regular file rel for reading.
func (f *FS) Open(p string) (*os.File, error) { return f.openRegular(p, unix.O_RDONLY) }

// openRegular opens the existing regular file p with flags (no creation,
// no truncation), following links inside the root; a directory is
// EISDIR, anything else not a regular file is refused.
func (f *FS) openRegular(p string, flags int) (*os.File, error) {
	rel, err := f.Clean(p)
	if err != nil {
		return nil, err
	}
	fd, st, err := f.lookup(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return nil, fmt.Errorf("%s: %w", p, unix.EISDIR)
	default:
		return nil, fmt.Errorf("%s: not a regular file: %w", p, ErrRefused)
	}
	return reopen(fd, flags)
}

// Create creates or truncates the regular file p, creating its parents.
func (f *FS) Create(p string, mode uint32) (*os.File, error) {
	rel, err := f.Clean(p)
	if err != nil {
		return nil, err
	}
	if rel == "" {
		return nil, fmt.Errorf("%s: %w", p, unix.EISDIR)
	}
	if mode == 0 {
		mode = 0o644
	}
	mode &= 0o1777
	dir, base := path.Split(rel)
	pfd, err := f.mkdirAll(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err == nil {
		f.chown(fd)
		_ = unix.Fchmod(fd, mode)
		return os.NewFile(uintptr(fd), rel), nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return nil, err
	}
	// Exists: follow it (inside the root) and truncate it only if it is
	// a plain file.
	ofd, st, err := f.lookup(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ofd)
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: exists and is not a regular file: %w", p, ErrRefused)
	}
	return reopen(ofd, unix.O_WRONLY|unix.O_TRUNC)
}

func (f *FS) chown(fd int) {
	if f.UID >= 0 {
		_ = unix.Fchown(fd, f.UID, f.GID)
	}
}

// mkdirAll returns an O_PATH descriptor of directory rel, creating
// missing components (owned by UID/GID).
func (f *FS) mkdirAll(rel string) (int, error) {
	if fd, st, err := f.lookup(rel); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return -1, fmt.Errorf("/%s: %w", rel, unix.ENOTDIR)
		}
		return fd, nil
	} else if !errors.Is(err, unix.ENOENT) {
		return -1, err
	}
	dir, base := path.Split(rel)
	pfd, err := f.mkdirAll(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, base, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	} else if err == nil && f.UID >= 0 {
		_ = unix.Fchownat(pfd, base, f.UID, f.GID, unix.AT_SYMLINK_NOFOLLOW)
	}
	fd, st, err := f.lookup(rel)
	if err != nil {
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, fmt.Errorf("/%s: %w", rel, unix.ENOTDIR)
	}
	return fd, nil
}

// MkdirAll creates directory p and its parents.
func (f *FS) MkdirAll(p string) error {
	rel, err := f.Clean(p)
	if err != nil {
		return err
	}
	fd, err := f.mkdirAll(rel)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// Delete removes p (a directory only when empty, unless recursive). The
// last component itself is removed, never what a symlink points at.
func (f *FS) Delete(p string, recursive bool) error {
	rel, err := f.Clean(p)
	if err != nil {
		return err
	}
	if rel == "" {
		return fmt.Errorf("%s: %w", p, ErrRefused)
	}
	dir, base := path.Split(rel)
	pfd, st, err := f.lookup(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s: %w", p, unix.ENOTDIR)
	}
	dfd, err := reopen(pfd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer dfd.Close()
	return removeAt(int(dfd.Fd()), base, recursive)
}

func removeAt(dirfd int, name string, recursive bool) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || !errors.Is(err, unix.EISDIR) {
		return err
	}
	err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	if err == nil || !recursive || !(errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)) {
		return err
	}
	cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(cfd), name)
	names, err := d.Readdirnames(-1)
	if err != nil {
		d.Close()
		return err
	}
	for _, n := range names {
		if err := removeAt(cfd, n, true); err != nil {
			d.Close()
			return err
		}
	}
	d.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

func entry(name string, st *unix.Stat_t) Entry {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	return Entry{Name: name, Size: st.Size, Mode: uint32(m), ModTime: int64(st.Mtim.Sec)}
}

// Stat describes p (following symlinks inside the root).
func (f *FS) Stat(p string) (Entry, error) {
	rel, err := f.Clean(p)
	if err != nil {
		return Entry{}, err
	}
	fd, st, err := f.lookup(rel)
	if err != nil {
		return Entry{}, err
	}
	unix.Close(fd)
	return entry(path.Base("/"+rel), &st), nil
}

// List lists directory p; symlinks are reported, not followed.
func (f *FS) List(p string) ([]Entry, error) {
	rel, err := f.Clean(p)
	if err != nil {
		return nil, err
	}
	fd, st, err := f.lookup(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("%s: %w", p, unix.ENOTDIR)
	}
	d, err := reopen(fd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		var cst unix.Stat_t
		if unix.Fstatat(int(d.Fd()), n, &cst, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		e := entry(n, &cst)
		if cst.Mode&unix.S_IFMT == unix.S_IFLNK {
			e.Link, _ = readlinkat(int(d.Fd()), n)
		}
		out = append(out, e)
	}
	return out, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// TarOut writes p (a file, or a directory and everything below it) to w
// as a tar stream whose entries are named by p's base name. Symlinks are
// archived as symlinks; devices, FIFOs, sockets and kernel filesystems
// are skipped. Ids are reported relative to UID/GID.
func (f *FS) TarOut(p string, w io.Writer) error {
	rel, err := f.Clean(p)
	if err != nil {
		return err
	}
	fd, st, err := f.lookup(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	name := path.Base("/" + rel)
	if rel == "" {
		name = "."
	}
	tw := tar.NewWriter(w)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		file, err := reopen(fd, unix.O_RDONLY)
		if err != nil {
			return err
		}
		err = f.tarFile(tw, name, file, &st)
		file.Close()
		if err != nil {
			return err
		}
	case unix.S_IFDIR:
		d, err := reopen(fd, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		err = f.tarDir(tw, name, d, &st)
		d.Close()
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s: not a file or directory: %w", p, ErrRefused)
	}
	return tw.Close()
}

func (f *FS) header(name string, st *unix.Stat_t) *tar.Header {
	h := &tar.Header{Name: name, Mode: int64(st.Mode & 0o7777), ModTime: time.Unix(st.Mtim.Unix()),
		Uid: int(st.Uid), Gid: int(st.Gid), Format: tar.FormatPAX}
	if f.UID >= 0 && h.Uid >= f.UID && h.Uid < f.UID+65536 {
		h.Uid -= f.UID
		h.Gid -= f.GID
	}
	return h
}

func (f *FS) tarFile(tw *tar.Writer, name string, file *os.File, st *unix.Stat_t) error {
	h := f.header(name, st)
	h.Typeflag, h.Size = tar.TypeReg, st.Size
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// The sandbox may change the file while we read it: never write more
	// or less than the header promised.
	n, err := io.Copy(tw, io.LimitReader(file, st.Size))
	if err != nil {
		return err
	}
	if n < st.Size {
		_, err = io.CopyN(tw, zeroReader{}, st.Size-n)
	}
	return err
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

func (f *FS) tarDir(tw *tar.Writer, name string, d *os.File, st *unix.Stat_t) error {
	h := f.header(name+"/", st)
	h.Typeflag = tar.TypeDir
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	dfd := int(d.Fd())
	for _, n := range names {
		var cst unix.Stat_t
		if unix.Fstatat(dfd, n, &cst, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		child := name + "/" + n
		switch cst.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkat(dfd, n)
			if err != nil {
				continue
			}
			h := f.header(child, &cst)
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		case unix.S_IFREG:
			cfd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			file := os.NewFile(uintptr(cfd), child)
			var fst unix.Stat_t
			if unix.Fstat(cfd, &fst) == nil && fst.Mode&unix.S_IFMT == unix.S_IFREG {
				err = f.tarFile(tw, child, file, &fst)
			}
			file.Close()
			if err != nil {
				return err
			}
		case unix.S_IFDIR:
			cfd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			cd := os.NewFile(uintptr(cfd), child)
			var fst unix.Stat_t
			if unix.Fstat(cfd, &fst) == nil && !(f.InSandbox && special(cfd)) {
				err = f.tarDir(tw, child, cd, &fst)
			}
			cd.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// TarIn extracts the tar stream r into directory dir (created if
// missing). Entry names are confined to dir; existing entries are
// replaced, never written through; set-id bits are dropped; hard links,
// devices and FIFOs are skipped.
func (f *FS) TarIn(dir string, r io.Reader) error {
	base, err := f.Clean(dir)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name == "" {
			continue
		}
		full := path.Join("/"+base, name)
		rel, err := f.Clean(full)
		if err != nil {
			return err
		}
		mode := uint32(h.Mode) & 0o1777
		switch h.Typeflag {
		case tar.TypeDir:
			fd, err := f.mkdirAll(rel)
			if err != nil {
				return err
			}
			if d, err := reopen(fd, unix.O_RDONLY|unix.O_DIRECTORY); err == nil {
				_ = unix.Fchmod(int(d.Fd()), mode)
				d.Close()
			}
			unix.Close(fd)
		case tar.TypeReg, tar.TypeSymlink:
			pdir, leaf := path.Split(rel)
			pfd, err := f.mkdirAll(strings.TrimSuffix(pdir, "/"))
			if err != nil {
				return err
			}
			d, err := reopen(pfd, unix.O_RDONLY|unix.O_DIRECTORY)
			unix.Close(pfd)
			if err != nil {
				return err
			}
			err = f.createAt(int(d.Fd()), leaf, h, mode, tr)
			d.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
	}
}

func (f *FS) createAt(dirfd int, leaf string, h *tar.Header, mode uint32, r io.Reader) error {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := removeAt(dirfd, leaf, true); err != nil {
				return err
			}
		} else if err := unix.Unlinkat(dirfd, leaf, 0); err != nil {
			return err
		}
	}
	if h.Typeflag == tar.TypeSymlink {
		if err := unix.Symlinkat(h.Linkname, dirfd, leaf); err != nil {
			return err
		}
		if f.UID >= 0 {
			_ = unix.Fchownat(dirfd, leaf, f.UID, f.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
		return nil
	}
	fd, err := unix.Openat(dirfd, leaf, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	file := os.NewFile(uintptr(fd), leaf)
	defer file.Close()
	f.chown(fd)
	_ = unix.Fchmod(fd, mode)
	_, err = io.Copy(file, r)
	return err
}
