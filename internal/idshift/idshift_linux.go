// Package idshift moves a directory tree from one block of host ids to
// another: every file owned by an id of [from, from+size) gets the same
// id of [to, to+size), keeping what chown(2) would clear on the way (the
// set-user-ID and set-group-ID bits, the security.capability xattr).
// The image store uses it to convert a store unpacked with the earlier
// shifted ids, the native backend to move a persistent sandbox's
// writable layer to its block of host ids.
package idshift

import (
	"errors"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Tree moves root's files from the block at from to the block at to
// (size ids each; other ids are left alone). capability, when not nil,
// rewrites a file capability for its new owner (nil keeps it as it was).
// Symlinks are changed themselves, never followed. It can be run again
// after an interruption: files already moved are outside the old block.
func Tree(root string, from, to, size uint32, capability func([]byte) ([]byte, bool)) error {
	if from == to {
		return nil
	}
	move := func(id uint32) uint32 {
		if id >= from && id-from < size {
			return to + (id - from)
		}
		return id
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		uid, gid := move(st.Uid), move(st.Gid)
		if uid == st.Uid && gid == st.Gid {
			return nil
		}
		var capv []byte
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			buf := make([]byte, 64)
			if n, err := unix.Lgetxattr(p, "security.capability", buf); err == nil && n > 0 {
				capv = buf[:n]
			}
		}
		if err := unix.Lchown(p, int(uid), int(gid)); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			if err := unix.Chmod(p, st.Mode&0o7777); err != nil {
				return err
			}
		}
		if capv != nil {
			if capability != nil {
				v, ok := capability(capv)
				if !ok {
					return nil
				}
				capv = v
			}
			if err := unix.Lsetxattr(p, "security.capability", capv, 0); err != nil {
				return err
			}
		}
		return nil
	})
}
