package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// copyLayer copies the writable layer src into dst (which must not
// exist) as an overlay layer: whiteouts (0/0 character devices), opaque
// and other overlay xattrs, modes, owners (moved by shift), symlinks,
// device nodes and hard links kept; file data cloned (FICLONE) where the
// file system can, else copied with copy_file_range. Every entry is
// reached through its parent's descriptor, never following a link: a
// tree that changes meanwhile can only make the copy fail, never make it
// read or write outside src and dst.
func copyLayer(src, dst string, shift func(uint32) uint32) error {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	c := &layerCopier{shift: shift, links: map[[2]uint64]string{}}
	if err := c.dir(sfd, dfd, dst); err != nil {
		return err
	}
	return c.meta(sfd, dfd, "", &st)
}

type layerCopier struct {
	shift func(uint32) uint32
	// links maps a multiply linked file (device, inode) to its first
	// copy's path.
	links map[[2]uint64]string
}

// dir copies the entries of the directory sfd into dfd (whose path is
// dpath).
func (c *layerCopier) dir(sfd, dfd int, dpath string) error {
	d := os.NewFile(uintptr(mustDup(sfd)), "")
	if d == nil {
		return errors.New("duplicating a directory descriptor")
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if err := c.entry(sfd, dfd, dpath, name); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dpath, name), err)
		}
	}
	return nil
}

func mustDup(fd int) int {
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return n
}

func (c *layerCopier) entry(sfd, dfd int, dpath, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return err
		}
		s, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(s)
		d, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(d)
		if err := c.dir(s, d, filepath.Join(dpath, name)); err != nil {
			return err
		}
		return c.meta(s, d, "", &st)
	case unix.S_IFREG:
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				return unix.Linkat(unix.AT_FDCWD, first, dfd, name, 0)
			}
			c.links[key] = filepath.Join(dpath, name)
		}
		s, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		sf := os.NewFile(uintptr(s), name)
		defer sf.Close()
		d, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		df := os.NewFile(uintptr(d), name)
		defer df.Close()
		if unix.IoctlFileClone(d, s) != nil {
			// (*os.File).ReadFrom uses copy_file_range where it can.
			if _, err := io.Copy(df, sf); err != nil {
				return err
			}
		}
		return c.meta(s, d, "", &st)
	case unix.S_IFLNK:
		target, err := readlinkat(sfd, name)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(target, dfd, name); err != nil {
			return err
		}
		return c.meta(sfd, dfd, name, &st)
	default:
		// Whiteouts (0/0 character devices), other devices, fifos and
		// sockets.
		if err := unix.Mknodat(dfd, name, st.Mode, int(st.Rdev)); err != nil {
			return err
		}
		return c.meta(sfd, dfd, name, &st)
	}
}

func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		k, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if k < n {
			return string(buf[:k]), nil
		}
	}
}

// meta gives the copy its owner (shifted), mode, xattrs and times: of
// the open descriptors s and d themselves when name is "", else of the
// entry name in the directories s and d (symlinks, devices).
func (c *layerCopier) meta(s, d int, name string, st *unix.Stat_t) error {
	uid, gid := int(c.shift(st.Uid)), int(c.shift(st.Gid))
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if name == "" {
		if err := unix.Fchown(d, uid, gid); err != nil {
			return err
		}
		// chown clears the set-id bits: the mode comes after it.
		if err := unix.Fchmod(d, st.Mode&0o7777); err != nil {
			return err
		}
	} else {
		if err := unix.Fchownat(d, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if !isLink {
			if err := unix.Fchmodat(d, name, st.Mode&0o7777, 0); err != nil {
				return err
			}
		}
	}
	if err := c.xattrs(s, d, name, isLink); err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(unix.TimespecToNsec(st.Atim)), unix.NsecToTimespec(unix.TimespecToNsec(st.Mtim))}
	if name == "" {
		return unix.UtimesNano("/proc/self/fd/"+strconv.Itoa(d), ts)
	}
	return unix.UtimesNanoAt(d, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// xattrs copies every extended attribute (the overlay's marks,
// capabilities); one a file system does not take on this kind of file
// (user.* on a symlink) is left out. With name "" s and d are the files
// themselves, else the directories holding name.
func (c *layerCopier) xattrs(s, d int, name string, isLink bool) error {
	listx := func(buf []byte) (int, error) { return unix.Flistxattr(s, buf) }
	getx := func(a string, buf []byte) (int, error) { return unix.Fgetxattr(s, a, buf) }
	setx := func(a string, v []byte) error { return unix.Fsetxattr(d, a, v, 0) }
	if name != "" {
		// The descriptor's magic link is followed, name is not.
		sp := "/proc/self/fd/" + strconv.Itoa(s) + "/" + name
		dp := "/proc/self/fd/" + strconv.Itoa(d) + "/" + name
		listx = func(buf []byte) (int, error) { return unix.Llistxattr(sp, buf) }
		getx = func(a string, buf []byte) (int, error) { return unix.Lgetxattr(sp, a, buf) }
		setx = func(a string, v []byte) error { return unix.Lsetxattr(dp, a, v, 0) }
	}
	var names []string
	for n := 1024; ; n *= 4 {
		buf := make([]byte, n)
		k, err := listx(buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, a := range strings.Split(string(buf[:k]), "\x00") {
			if a != "" {
				names = append(names, a)
			}
		}
		break
	}
	for _, a := range names {
		var v []byte
		for n := 256; ; n *= 4 {
			buf := make([]byte, n)
			k, err := getx(a, buf)
			if errors.Is(err, unix.ERANGE) {
				continue
			}
			if err != nil {
				return fmt.Errorf("xattr %s: %w", a, err)
			}
			v = buf[:k]
			break
		}
		if err := setx(a, v); err != nil {
			if isLink && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP)) {
				continue
			}
			return fmt.Errorf("xattr %s: %w", a, err)
		}
	}
	return nil
}
