//go:build linux

package image

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// resolveFlags confine every path lookup of the extractor to the layer
// directory: symlinks and ".." resolve as if the layer were "/", and
// /proc magic links are refused.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// extractor writes one layer tar into an empty directory. See the
// package documentation for what it keeps, converts and refuses.
type extractor struct {
	ctx  context.Context
	root int // O_RDONLY|O_DIRECTORY fd of the layer root
	opts extractOptions
	st   extractStats

	// The parent directory of the previous entry, kept open because tars
	// list a directory's entries together. Dropped (stale) whenever
	// anything is removed, since the path could now resolve elsewhere.
	cacheDir   string
	cacheFD    int
	cacheStale bool

	dirs   []dirMeta      // deferred directory modes and times
	dirIdx map[string]int // path -> index in dirs
	buf    []byte
}

// dirMeta is applied to a directory after everything in it is written:
// writing a child changes the directory's mtime, and a read-only mode
// would stop a rootless extractor from writing the child at all.
type dirMeta struct {
	path  string
	mode  uint32
	atime time.Time
	mtime time.Time
}

// extractTar unpacks the (uncompressed) tar stream r into dir, which must
// exist and should be empty.
func extractTar(ctx context.Context, r io.Reader, dir string, opts extractOptions) (extractStats, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return extractStats{}, fmt.Errorf("open layer directory: %w", err)
	}
	e := &extractor{
		ctx:     ctx,
		root:    root,
		opts:    opts,
		cacheFD: -1,
		dirIdx:  map[string]int{},
		buf:     make([]byte, 256<<10),
	}
	defer e.close()
	if opts.chown {
		// The layer root belongs to the image's root unless the tar says.
		if err := unix.Fchown(root, opts.idmap.HostUID(0), opts.idmap.HostGID(0)); err != nil {
			return extractStats{}, err
		}
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return e.st, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return e.st, fmt.Errorf("reading layer: %w", err)
		}
		if err := e.entry(hdr, tr); err != nil {
			return e.st, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
	if err := e.finish(); err != nil {
		return e.st, err
	}
	return e.st, nil
}

func (e *extractor) close() {
	if e.cacheFD >= 0 {
		_ = unix.Close(e.cacheFD)
		e.cacheFD = -1
	}
	_ = unix.Close(e.root)
}

// cleanName turns a tar name into a clean path relative to the layer root
// ("" for the root itself). Leading slashes are dropped (the name is
// taken relative to the root); a ".." that would climb above the root is
// an error.
func cleanName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name contains NUL")
	}
	depth := 0
	for rest := name; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return "", errors.New("path escapes the layer root")
			}
		default:
			depth++
		}
	}
	p := path.Clean("/" + name)
	return p[1:], nil
}

func splitPath(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

func (e *extractor) entry(hdr *tar.Header, r io.Reader) error {
	p, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if p == "" {
		if hdr.Typeflag == tar.TypeDir {
			if e.opts.chown {
				if err := unix.Fchown(e.root, e.opts.idmap.HostUID(hdr.Uid), e.opts.idmap.HostGID(hdr.Gid)); err != nil {
					return err
				}
			}
			e.deferDir("", hdr)
		}
		return nil
	}
	dir, base := splitPath(p)

	if strings.HasPrefix(base, whiteoutPrefix) {
		return e.whiteout(dir, base)
	}

	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont, tar.TypeGNUSparse:
	case tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	case tar.TypeChar, tar.TypeBlock:
		if !e.opts.devices {
			e.st.SkippedDevices++
			return nil
		}
	default:
		// Global PAX headers, Solaris/GNU extensions we do not support.
		e.st.SkippedEntries++
		return nil
	}

	pfd, err := e.parent(dir)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return e.mkdir(pfd, base, p, hdr)
	case tar.TypeSymlink:
		return e.symlink(pfd, base, hdr)
	case tar.TypeLink:
		return e.hardlink(pfd, base, p, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return e.mknod(pfd, base, hdr)
	default:
		return e.regular(pfd, base, hdr, r)
	}
}

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	whiteoutMeta   = ".wh..wh."
)

// whiteout converts an OCI whiteout entry to overlayfs form.
func (e *extractor) whiteout(dir, base string) error {
	if base == whiteoutOpaque {
		dfd, err := e.parent(dir)
		if err != nil {
			return err
		}
		fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := e.setOpaque(fd); err != nil {
			return err
		}
		e.st.Opaques++
		return nil
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		// AUFS bookkeeping (.wh..wh.plnk, .wh..wh.aufs): not content.
		e.st.SkippedEntries++
		return nil
	}
	target := base[len(whiteoutPrefix):]
	if target == "" || target == "." || target == ".." {
		return errors.New("invalid whiteout name")
	}
	pfd, err := e.parent(dir)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, target, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		// Whiteouts hide lower layers only; this layer's own file stays.
		return nil
	}
	if err := unix.Mknodat(pfd, target, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("creating whiteout: %w", err)
	}
	e.st.Whiteouts++
	return nil
}

// setOpaque marks the directory open on fd as opaque for overlayfs.
func (e *extractor) setOpaque(fd int) error {
	if e.opts.trustedXattrs {
		if err := unix.Fsetxattr(fd, "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			return fmt.Errorf("marking directory opaque: %w", err)
		}
	}
	if err := unix.Fsetxattr(fd, "user.overlay.opaque", []byte("y"), 0); err != nil {
		return fmt.Errorf("marking directory opaque (user.overlay.opaque): %w", err)
	}
	return nil
}

// parent returns an O_PATH fd of directory dir inside the root, creating
// missing directories. The fd belongs to the extractor: do not close it.
func (e *extractor) parent(dir string) (int, error) {
	if dir == "" {
		return e.root, nil
	}
	if e.cacheFD >= 0 && !e.cacheStale && e.cacheDir == dir {
		return e.cacheFD, nil
	}
	fd, err := e.openDir(dir)
	if errors.Is(err, unix.ENOENT) {
		fd, err = e.mkdirAll(dir)
	}
	if err != nil {
		return -1, fmt.Errorf("parent directory %q: %w", dir, err)
	}
	if e.cacheFD >= 0 {
		_ = unix.Close(e.cacheFD)
	}
	e.cacheDir, e.cacheFD, e.cacheStale = dir, fd, false
	return fd, nil
}

// openDir opens directory p confined to the root.
func (e *extractor) openDir(p string) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(e.root, p, &how)
		// EAGAIN: a rename or mount somewhere raced the confined lookup.
		if (err == unix.EAGAIN || err == unix.EINTR) && i < 64 {
			continue
		}
		return fd, err
	}
}

// mkdirAll creates the missing directories of p (mode 0755, owned by the
// shifted root) one component at a time, each inside a directory that was
// itself resolved within the root.
func (e *extractor) mkdirAll(p string) (int, error) {
	cur := e.root
	closeCur := func() {
		if cur != e.root {
			_ = unix.Close(cur)
		}
	}
	end := 0
	for end < len(p) {
		next := strings.IndexByte(p[end:], '/')
		if next < 0 {
			end = len(p)
		} else {
			end += next
		}
		prefix := p[:end]
		_, comp := splitPath(prefix)
		fd, err := e.openDir(prefix)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(cur, comp, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				closeCur()
				return -1, err
			}
			if e.opts.chown {
				_ = unix.Fchownat(cur, comp, e.opts.idmap.HostUID(0), e.opts.idmap.HostGID(0), unix.AT_SYMLINK_NOFOLLOW)
			}
			fd, err = e.openDir(prefix)
		}
		closeCur()
		if err != nil {
			return -1, err
		}
		cur = fd
		end++ // skip the slash
	}
	return cur, nil
}

// remove deletes whatever is at name (recursively for a directory).
func (e *extractor) remove(pfd int, name string) error {
	e.cacheStale = true
	err := unix.Unlinkat(pfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	return removeAllAt(pfd, name, 0)
}

// removeAllAt removes directory name under pfd and everything in it,
// never following symlinks.
func removeAllAt(pfd int, name string, depth int) error {
	if depth > 4096 {
		return errors.New("directory tree too deep")
	}
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	_ = unix.Fchmodat(pfd, name, 0o700, 0)
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readDirNames(fd)
	if err == nil {
		for _, n := range names {
			if uerr := unix.Unlinkat(fd, n, 0); uerr != nil && !errors.Is(uerr, unix.ENOENT) {
				if rerr := removeAllAt(fd, n, depth+1); rerr != nil {
					err = rerr
					break
				}
			}
		}
	}
	_ = unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
}

// readDirNames lists a directory fd (without "." and "..").
func readDirNames(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

func (e *extractor) owner(hdr *tar.Header) (int, int) {
	return e.opts.idmap.HostUID(hdr.Uid), e.opts.idmap.HostGID(hdr.Gid)
}

func perm(hdr *tar.Header) uint32 { return uint32(hdr.Mode) & 0o7777 }

func times(hdr *tar.Header) []unix.Timespec {
	mt := hdr.ModTime
	at := hdr.AccessTime
	if at.IsZero() {
		at = mt
	}
	return []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
}

func (e *extractor) regular(pfd int, name string, hdr *tar.Header, r io.Reader) error {
	fd, err := e.create(pfd, name)
	if err != nil {
		return err
	}
	err = e.writeAll(fd, r)
	if err == nil && e.opts.chown {
		uid, gid := e.owner(hdr)
		err = unix.Fchown(fd, uid, gid)
	}
	if err == nil {
		// After chown, which clears setuid and setgid bits.
		err = unix.Fchmod(fd, perm(hdr))
	}
	if err == nil {
		e.xattrs(fd, hdr)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	e.st.Files++
	return unix.UtimesNanoAt(pfd, name, times(hdr), unix.AT_SYMLINK_NOFOLLOW)
}

// create makes a new regular file at name, replacing (never following)
// whatever is there.
func (e *extractor) create(pfd int, name string) (int, error) {
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(pfd, name, flags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		if err := e.remove(pfd, name); err != nil {
			return -1, err
		}
		fd, err = unix.Openat(pfd, name, flags, 0o600)
	}
	return fd, err
}

// writeAll copies the entry's content to fd. Runs of zeros as long as
// the copy buffer are skipped with lseek rather than written, so sparse
// files (and zero-filled ones) stay sparse instead of filling the disk.
func (e *extractor) writeAll(fd int, r io.Reader) error {
	var pos int64
	holeAtEnd := false
	for {
		n, rerr := io.ReadFull(r, e.buf)
		if n > 0 {
			e.st.Bytes += int64(n)
			if e.opts.maxBytes > 0 && e.st.Bytes > e.opts.maxBytes {
				return errors.New("layer content exceeds the size limit")
			}
			if n == len(e.buf) && allZero(e.buf) {
				if _, err := unix.Seek(fd, int64(n), io.SeekCurrent); err != nil {
					return err
				}
				holeAtEnd = true
			} else {
				if err := writeFull(fd, e.buf[:n]); err != nil {
					return err
				}
				holeAtEnd = false
			}
			pos += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			if holeAtEnd {
				return unix.Ftruncate(fd, pos)
			}
			return nil
		}
		if rerr != nil {
			return rerr
		}
		if err := e.ctx.Err(); err != nil {
			return err
		}
	}
}

func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		w, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[w:]
	}
	return nil
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (e *extractor) mkdir(pfd int, name, full string, hdr *tar.Header) error {
	err := unix.Mkdirat(pfd, name, 0o700)
	opaque := false
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			// A directory replacing this layer's own whiteout hides the
			// lower directory's contents: make it opaque.
			opaque = st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
			if err := e.remove(pfd, name); err != nil {
				return err
			}
			err = unix.Mkdirat(pfd, name, 0o700)
		} else {
			err = nil
		}
	}
	if err != nil {
		return err
	}
	if e.opts.chown {
		uid, gid := e.owner(hdr)
		if err := unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if opaque || hasXattrs(hdr) {
		fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if opaque {
			err = e.setOpaque(fd)
		}
		e.xattrs(fd, hdr)
		_ = unix.Close(fd)
		if err != nil {
			return err
		}
	}
	e.st.Dirs++
	e.deferDir(full, hdr)
	return nil
}

func (e *extractor) deferDir(p string, hdr *tar.Header) {
	m := dirMeta{path: p, mode: perm(hdr), atime: hdr.AccessTime, mtime: hdr.ModTime}
	if m.atime.IsZero() {
		m.atime = m.mtime
	}
	if i, ok := e.dirIdx[p]; ok {
		e.dirs[i] = m
		return
	}
	e.dirIdx[p] = len(e.dirs)
	e.dirs = append(e.dirs, m)
}

func (e *extractor) symlink(pfd int, name string, hdr *tar.Header) error {
	if hdr.Linkname == "" {
		return errors.New("symlink with empty target")
	}
	// The target is stored verbatim: it is only ever resolved inside the
	// sandbox's root, or by this extractor confined to the layer.
	err := unix.Symlinkat(hdr.Linkname, pfd, name)
	if errors.Is(err, unix.EEXIST) {
		if err := e.remove(pfd, name); err != nil {
			return err
		}
		err = unix.Symlinkat(hdr.Linkname, pfd, name)
	}
	if err != nil {
		return err
	}
	if e.opts.chown {
		uid, gid := e.owner(hdr)
		if err := unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if hasXattrs(hdr) {
		e.st.SkippedXattrs++
	}
	e.st.Symlinks++
	return unix.UtimesNanoAt(pfd, name, times(hdr), unix.AT_SYMLINK_NOFOLLOW)
}

func (e *extractor) hardlink(pfd int, name, full string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hardlink target %q: %w", hdr.Linkname, err)
	}
	if target == "" {
		return errors.New("hardlink to the layer root")
	}
	if target == full {
		return nil
	}
	tdir, tbase := splitPath(target)
	tfd := e.root
	if tdir != "" {
		// The target's directory must already exist in this layer.
		tfd, err = e.openDir(tdir)
		if err != nil {
			return fmt.Errorf("hardlink target %q: %w", hdr.Linkname, err)
		}
		defer unix.Close(tfd)
	}
	// flags 0: a symlink target is linked itself, never followed.
	err = unix.Linkat(tfd, tbase, pfd, name, 0)
	if errors.Is(err, unix.EEXIST) {
		if err := e.remove(pfd, name); err != nil {
			return err
		}
		err = unix.Linkat(tfd, tbase, pfd, name, 0)
	}
	if err != nil {
		return fmt.Errorf("hardlink to %q: %w", hdr.Linkname, err)
	}
	e.st.Hardlinks++
	return nil
}

func (e *extractor) mknod(pfd int, name string, hdr *tar.Header) error {
	var mode uint32
	dev := 0
	switch hdr.Typeflag {
	case tar.TypeChar:
		mode = unix.S_IFCHR
		dev = int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
	case tar.TypeBlock:
		mode = unix.S_IFBLK
		dev = int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
	default:
		mode = unix.S_IFIFO
	}
	err := unix.Mknodat(pfd, name, mode|0o600, dev)
	if errors.Is(err, unix.EEXIST) {
		if err := e.remove(pfd, name); err != nil {
			return err
		}
		err = unix.Mknodat(pfd, name, mode|0o600, dev)
	}
	if errors.Is(err, unix.EPERM) && mode != unix.S_IFIFO {
		e.st.SkippedDevices++
		return nil
	}
	if err != nil {
		return err
	}
	if e.opts.chown {
		uid, gid := e.owner(hdr)
		if err := unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	// fchmodat follows symlinks, but name was just created as a node.
	if err := unix.Fchmodat(pfd, name, perm(hdr), 0); err != nil {
		return err
	}
	if hasXattrs(hdr) {
		e.st.SkippedXattrs++
	}
	e.st.Devices++
	return unix.UtimesNanoAt(pfd, name, times(hdr), unix.AT_SYMLINK_NOFOLLOW)
}

// finish applies deferred directory modes and times, deepest last-listed
// first.
func (e *extractor) finish() error {
	for i := len(e.dirs) - 1; i >= 0; i-- {
		d := e.dirs[i]
		ts := []unix.Timespec{unix.NsecToTimespec(d.atime.UnixNano()), unix.NsecToTimespec(d.mtime.UnixNano())}
		if d.path == "" {
			if err := unix.Fchmod(e.root, d.mode); err != nil {
				return err
			}
			if err := unix.UtimesNanoAt(e.root, ".", ts, 0); err != nil {
				return err
			}
			continue
		}
		dir, base := splitPath(d.path)
		pfd := e.root
		if dir != "" {
			fd, err := e.openDir(dir)
			if err != nil {
				continue // replaced later in the tar
			}
			pfd = fd
		}
		var st unix.Stat_t
		err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.Fchmodat(pfd, base, d.mode, 0)
			if err == nil {
				err = unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
			}
		} else {
			err = nil
		}
		if pfd != e.root {
			_ = unix.Close(pfd)
		}
		if err != nil {
			return fmt.Errorf("directory %q: %w", d.path, err)
		}
	}
	return nil
}

func hasXattrs(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, paxXattr) {
			return true
		}
	}
	return false
}

const paxXattr = "SCHILY.xattr."

// xattrs applies the entry's allowed xattrs to fd; the rest are counted.
func (e *extractor) xattrs(fd int, hdr *tar.Header) {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattr)
		if !ok {
			continue
		}
		val, ok := filterXattr(name, []byte(v), e.opts)
		if !ok {
			e.st.SkippedXattrs++
			continue
		}
		if err := unix.Fsetxattr(fd, name, val, 0); err != nil {
			e.st.SkippedXattrs++
		}
	}
}
