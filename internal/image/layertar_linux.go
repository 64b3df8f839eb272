package image

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// maxLayerDepth bounds how deep a layer's directories may nest in an
// export (one open descriptor per level).
const maxLayerDepth = 512

// layerTarOptions say how a layer directory's files become tar entries.
type layerTarOptions struct {
	// idmap is the shift the directory's owners were stored with:
	// stored ids go back to the image's own.
	idmap IDMap
	// rootless: the layers are a rootless sandbox's, whose user
	// namespace maps its root to the caller (ownerUID, ownerGID) and
	// its ids 1… to the caller's subordinate ranges (sub).
	ownerUID, ownerGID int
	rootless           bool
	sub                subRanges
}

// subRanges are the caller's first subordinate uid and gid ranges, as a
// rootless sandbox maps its ids 1… onto them (count 0: none).
type subRanges struct {
	uidStart, uidCount, gidStart, gidCount uint32
}

// writeLayerTar writes the layer directory dir, in overlayfs form, as an
// OCI layer tar: a 0/0 character device (or a file marked with an
// overlay.whiteout xattr) becomes a ".wh.NAME" entry, an opaque
// directory gets a ".wh..wh..opq" entry, owners go back to the image's
// ids, overlayfs' own xattrs are dropped. Entries come in a fixed order
// (names sorted, hard links to the first name seen), so two writes of
// an unchanged directory give the same bytes. Nothing is followed: every
// file is opened relative to its directory's descriptor, without
// following a symlink. A file whose own name starts with ".wh." is
// refused: it would be read back as a whiteout.
func writeLayerTar(ctx context.Context, dir string, w io.Writer, o layerTarOptions) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("layer %s: %w", dir, err)
	}
	defer unix.Close(fd)
	lw := &layerWriter{ctx: ctx, tw: tar.NewWriter(w), o: o, links: map[[2]uint64]string{}, buf: make([]byte, 1<<20)}
	if err := lw.walk(fd, "", 0); err != nil {
		return fmt.Errorf("layer %s: %w", dir, err)
	}
	return lw.tw.Close()
}

type layerWriter struct {
	ctx   context.Context
	tw    *tar.Writer
	o     layerTarOptions
	links map[[2]uint64]string
	buf   []byte
}

func (lw *layerWriter) ids(st *unix.Stat_t) (int, int) {
	if lw.o.rootless {
		return rootlessID(st.Uid, lw.o.ownerUID, lw.o.sub.uidStart, lw.o.sub.uidCount),
			rootlessID(st.Gid, lw.o.ownerGID, lw.o.sub.gidStart, lw.o.sub.gidCount)
	}
	return unshift(st.Uid, lw.o.idmap.UID, lw.o.idmap.Size), unshift(st.Gid, lw.o.idmap.GID, lw.o.idmap.Size)
}

// rootlessID maps a host id of a rootless sandbox's layer back to the
// sandbox's: the caller's is 0, its subordinate range 1…, anything else
// (no sandbox of the caller can have made it) the overflow id.
func rootlessID(id uint32, own int, start, count uint32) int {
	switch {
	case int(id) == own:
		return 0
	case count > 0 && id >= start && id-start < count:
		return int(id-start) + 1
	}
	return 65534
}

// unshift maps a stored id back to the image's (ids outside the map
// become the overflow id).
func unshift(id, base, size uint32) int {
	if size == 0 {
		return int(id)
	}
	if id < base || id-base >= size {
		return 65534
	}
	return int(id - base)
}

func (lw *layerWriter) header(name string, st *unix.Stat_t) *tar.Header {
	uid, gid := lw.ids(st)
	return &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     uid,
		Gid:     gid,
		ModTime: time.Unix(st.Mtim.Unix()).UTC().Truncate(time.Second),
	}
}

func (lw *layerWriter) walk(dfd int, rel string, depth int) error {
	if depth > maxLayerDepth {
		return fmt.Errorf("%s: directories nested deeper than %d levels: %w", rel, maxLayerDepth, ErrNotExportable)
	}
	if err := lw.ctx.Err(); err != nil {
		return err
	}
	names, err := readDirNames(dfd)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := lw.entry(dfd, rel, n, depth); err != nil {
			return err
		}
	}
	return nil
}

func (lw *layerWriter) entry(dfd int, rel, n string, depth int) error {
	name := path.Join(rel, n)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFCHR && st.Rdev == 0 {
		return lw.whiteout(rel, n)
	}
	if strings.HasPrefix(n, whiteoutPrefix) {
		return fmt.Errorf("%s: a file whose name starts with %q would be read as a whiteout (rename or remove it): %w", name, whiteoutPrefix, ErrNotExportable)
	}
	hdr := lw.header(name, &st)
	switch typ {
	case unix.S_IFDIR:
		return lw.dir(dfd, n, hdr, depth)
	case unix.S_IFREG:
		return lw.regular(dfd, n, hdr, &st)
	case unix.S_IFLNK:
		target, err := readlinkat(dfd, n)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, target, 0o777
		return lw.tw.WriteHeader(hdr)
	case unix.S_IFCHR, unix.S_IFBLK:
		hdr.Typeflag = tar.TypeChar
		if typ == unix.S_IFBLK {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		return lw.tw.WriteHeader(hdr)
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return lw.tw.WriteHeader(hdr)
	}
	return nil // sockets: no tar form, and nothing a new sandbox could use
}

func (lw *layerWriter) whiteout(rel, n string) error {
	return lw.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path.Join(rel, whiteoutPrefix+n), Mode: 0o600, ModTime: time.Unix(0, 0).UTC()})
}

func (lw *layerWriter) dir(dfd int, n string, hdr *tar.Header, depth int) error {
	fd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	defer unix.Close(fd)
	x, err := lw.xattrs(fd, hdr.Name)
	if err != nil {
		return err
	}
	hdr.Typeflag = tar.TypeDir
	hdr.Name += "/"
	opaque := x.opaque
	hdr.PAXRecords = x.pax
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if opaque {
		name := strings.TrimSuffix(hdr.Name, "/")
		if err := lw.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path.Join(name, whiteoutOpaque), Mode: 0o600, ModTime: time.Unix(0, 0).UTC()}); err != nil {
			return err
		}
	}
	return lw.walk(fd, strings.TrimSuffix(hdr.Name, "/"), depth+1)
}

func (lw *layerWriter) regular(dfd int, n string, hdr *tar.Header, st *unix.Stat_t) error {
	key := [2]uint64{st.Dev, st.Ino}
	if st.Nlink > 1 {
		if first, ok := lw.links[key]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return lw.tw.WriteHeader(hdr)
		}
	}
	fd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	f := os.NewFile(uintptr(fd), hdr.Name)
	defer f.Close()
	x, err := lw.xattrs(fd, hdr.Name)
	if err != nil {
		return err
	}
	if x.whiteout && st.Size == 0 {
		return lw.whiteout(path.Dir(hdr.Name), n)
	}
	hdr.Typeflag, hdr.Size, hdr.PAXRecords = tar.TypeReg, st.Size, x.pax
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if st.Nlink > 1 {
		lw.links[key] = hdr.Name
	}
	got, err := io.CopyBuffer(lw.tw, io.LimitReader(f, st.Size), lw.buf)
	if err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	if got != st.Size {
		return fmt.Errorf("%s: changed while it was read", hdr.Name)
	}
	return nil
}

type layerXattrs struct {
	pax      map[string]string
	opaque   bool
	whiteout bool
}

// xattrs reads the extended attributes of the file open on fd: the
// overlay's marks (opaque, whiteout) and those a layer carries (user.*
// but the overlay's, a file capability for the image's root). A
// redirect or metacopy mark means the file's data or name lives in a
// lower layer, which a layer of its own cannot say: refused.
func (lw *layerWriter) xattrs(fd int, name string) (layerXattrs, error) {
	var x layerXattrs
	sz, err := unix.Flistxattr(fd, nil)
	if err != nil || sz == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return x, err
	}
	list := make([]byte, sz)
	sz, err = unix.Flistxattr(fd, list)
	if err != nil {
		return x, fmt.Errorf("%s: %w", name, err)
	}
	for _, k := range strings.Split(strings.TrimRight(string(list[:sz]), "\x00"), "\x00") {
		ov, isOverlay := strings.CutPrefix(k, "trusted.overlay.")
		if !isOverlay {
			ov, isOverlay = strings.CutPrefix(k, "user.overlay.")
		}
		keep := !isOverlay && (strings.HasPrefix(k, "user.") || k == "security.capability")
		if !isOverlay && !keep {
			continue
		}
		v, err := fgetxattr(fd, k)
		if err != nil {
			return x, fmt.Errorf("%s: xattr %s: %w", name, k, err)
		}
		switch {
		case isOverlay && ov == "opaque":
			x.opaque = x.opaque || string(v) == "y"
		case isOverlay && ov == "whiteout":
			x.whiteout = true
		case isOverlay && (ov == "redirect" || ov == "metacopy"):
			return x, fmt.Errorf("%s: an overlayfs %s mark (its data or name lives in a lower layer): %w", name, ov, ErrNotExportable)
		case k == "security.capability":
			if c, ok := unshiftCapability(v, lw.rootUID()); ok {
				x.pax = setPAX(x.pax, k, string(c))
			}
		case keep:
			x.pax = setPAX(x.pax, k, string(v))
		}
	}
	return x, nil
}

// rootUID is the host uid that stands for the image's root.
func (lw *layerWriter) rootUID() uint32 {
	if lw.o.rootless {
		return uint32(lw.o.ownerUID)
	}
	return lw.o.idmap.UID
}

// unshiftCapability turns a stored file capability back into the image
// form (v2, for the image's root): a v2 one as it is, a v3 one only when
// it belongs to the image's root (rootID); others apply to no one a
// sandbox of the image has.
func unshiftCapability(v []byte, rootID uint32) ([]byte, bool) {
	if len(v) < 4 {
		return nil, false
	}
	magic := binary.LittleEndian.Uint32(v)
	switch magic & vfsCapRevisionMask {
	case vfsCapRevision2:
		if len(v) != vfsCapSize2 {
			return nil, false
		}
	case vfsCapRevision3:
		if len(v) != vfsCapSize3 || binary.LittleEndian.Uint32(v[vfsCapSize2:]) != rootID {
			return nil, false
		}
	default:
		return nil, false
	}
	return shiftCapability(v, 0)
}

func setPAX(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[paxXattr+k] = v
	return m
}

func fgetxattr(fd int, k string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Fgetxattr(fd, k, buf)
		if errors.Is(err, unix.ERANGE) && len(buf) < 1<<20 {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

func readlinkat(dfd int, n string) (string, error) {
	buf := make([]byte, 256)
	for {
		k, err := unix.Readlinkat(dfd, n, buf)
		if err != nil {
			return "", err
		}
		if k < len(buf) {
			return string(buf[:k]), nil
		}
		if len(buf) >= 1<<16 {
			return "", errors.New("symlink target too long")
		}
		buf = make([]byte, len(buf)*4)
	}
}
