package native

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// prepareProcess resolves the command's user against the sandbox's own
// /etc/passwd and /etc/group, fills HOME, creates the working directory
// and lists the Landlock-writable paths.
func (s *initState) prepareProcess() error {
	e := &s.cfg.Exec
	// Look-ups below go through the root's descriptor with openat2's
	// RESOLVE_IN_ROOT when the kernel has it (5.6): one system call per
	// path instead of one per component, with the same meaning (resolveIn).
	rootFd, err := unix.Open(s.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		rootFd = -1
	} else {
		defer unix.Close(rootFd)
	}
	u, err := resolveUser(s.root, rootFd, e.User)
	if err != nil {
		return err
	}
	e.UID, e.GID, e.Groups = u.uid, u.gid, u.groups
	if err := s.writeSecretFiles(s.hostIDs(u)); err != nil {
		return err
	}
	if !hasEnv(e.Env, "HOME") {
		e.Env = append(e.Env, "HOME="+u.home)
		s.homeAdded = true
		if s.cfg.Host {
			s.makeHostHome(rootFd, u)
		}
	}
	if fd, err := openInRoot(rootFd, e.Workdir, unix.O_PATH); err == nil {
		unix.Close(fd) // it exists: the usual case
	} else if wd, err := s.inRoot(e.Workdir); err != nil {
		return fmt.Errorf("workdir %s: %w", e.Workdir, err)
	} else if _, err := os.Stat(wd); err != nil {
		uid, gid := s.hostIDs(u)
		if err := mkdirAllOwned(wd, uid, gid); err != nil {
			return fmt.Errorf("workdir %s: %w", e.Workdir, err)
		}
	}
	if e.Landlock {
		for _, m := range s.cfg.Mounts {
			if !m.ReadOnly {
				e.LandlockRW = append(e.LandlockRW, m.Dest)
			}
		}
		e.LandlockRootRW = !s.cfg.ReadOnlyRoot
	}
	return nil
}

// hostIDs are u's ids as the init sees them: those a file the command's
// user should own gets (rootless without subordinate ids: the caller's,
// the only ones mapped).
func (s *initState) hostIDs(u user) (uid, gid int) {
	if s.cfg.Rootless && !s.cfg.SubIDs && u.uid != 0 {
		return 0, 0
	}
	return s.cfg.RootUID + u.uid, s.cfg.RootGID + u.gid
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// mkdirAllOwned creates dir and its missing parents, giving the new
// directories to uid:gid.
func mkdirAllOwned(dir string, uid, gid int) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == "/" {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range missing {
		if err := os.Lchown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// user is a resolved process identity.
type user struct {
	uid, gid int
	groups   []int
	home     string
}

// ResolveUser resolves a command's user spec ("", "name", "uid",
// "name:group" or "uid:gid") against the image whose root is at root,
// the way a native run resolves it: the ids, the supplementary groups
// and the home directory. For backends that build the sandbox's
// process from outside it (gvisor).
func ResolveUser(root, spec string) (uid, gid int, groups []int, home string, err error) {
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, nil, "", fmt.Errorf("the image's root: %w", err)
	}
	defer unix.Close(rootFd)
	u, err := resolveUser(root, rootFd, spec)
	return u.uid, u.gid, u.groups, u.home, err
}

// resolveUser interprets "", "name", "uid", "name:group" or "uid:gid"
// against root/etc/passwd and root/etc/group, like docker does. rootFd is
// root opened, or -1.
func resolveUser(root string, rootFd int, spec string) (user, error) {
	u := user{home: "/"}
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" {
		name = "0"
	}
	passwd := readColonFile(root, rootFd, "/etc/passwd")
	found := false
	uname := ""
	for _, f := range passwd {
		if len(f) < 6 {
			continue
		}
		if f[0] == name || f[2] == name {
			u.uid, _ = strconv.Atoi(f[2])
			u.gid, _ = strconv.Atoi(f[3])
			u.home = f[5]
			uname, found = f[0], true
			break
		}
	}
	if !found {
		n, err := strconv.Atoi(name)
		if err != nil || n < 0 {
			return u, fmt.Errorf("user %q not found in the image's /etc/passwd", name)
		}
		u.uid, u.gid = n, 0
	}
	groups := readColonFile(root, rootFd, "/etc/group")
	if hasGroup {
		gfound := false
		for _, f := range groups {
			if len(f) >= 3 && (f[0] == group || f[2] == group) {
				u.gid, _ = strconv.Atoi(f[2])
				gfound = true
				break
			}
		}
		if !gfound {
			g, err := strconv.Atoi(group)
			if err != nil || g < 0 {
				return u, fmt.Errorf("group %q not found in the image's /etc/group", group)
			}
			u.gid = g
		}
	}
	u.groups = []int{u.gid}
	if uname != "" && !hasGroup {
		for _, f := range groups {
			if len(f) < 4 {
				continue
			}
			for _, m := range strings.Split(f[3], ",") {
				if m == uname {
					if g, err := strconv.Atoi(f[2]); err == nil && g != u.gid {
						u.groups = append(u.groups, g)
					}
				}
			}
		}
	}
	return u, nil
}

// maxColonFile is how much of an image's /etc/passwd or /etc/group is
// read: real ones are a few KiB.
const maxColonFile = 4 << 20

// readColonFile reads p of the image at root (opened as rootFd, or -1);
// a missing or unresolvable file reads as empty, and so does anything
// but a regular file: the image is untrusted, and a FIFO there would
// keep the open waiting for a writer for ever (hence O_NONBLOCK), a
// device such as /dev/zero would never end.
func readColonFile(root string, rootFd int, p string) [][]string {
	fd, err := openInRoot(rootFd, p, unix.O_RDONLY|unix.O_NONBLOCK)
	if errors.Is(err, errNoOpenat2) {
		var rp string
		if rp, err = resolveIn(root, p); err == nil {
			fd, err = unix.Open(root+rp, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		}
	}
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(fdReader(fd), maxColonFile))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}

// fdReader reads a descriptor without an os.File (which would look the
// descriptor up for the poller first).
type fdReader int

func (f fdReader) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(int(f), b)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// isDirIn reports whether p, resolved inside root, is a directory.
func isDirIn(root string, rootFd int, p string) bool {
	fd, err := openInRoot(rootFd, p, unix.O_PATH)
	if errors.Is(err, errNoOpenat2) {
		rp, err := resolveIn(root, p)
		if err != nil {
			return false
		}
		fi, err := os.Stat(root + rp)
		return err == nil && fi.IsDir()
	}
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}
