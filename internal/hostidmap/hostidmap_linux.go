package hostidmap

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
)

// Owner is whom a mount's writes are for.
type Owner struct {
	// UID and GID stand for the sandbox's root (0).
	UID, GID int
	// Base is the first host id of the sandbox's block: its id n
	// (1 ≤ n < idrange.Size) is host id Base+n.
	Base uint32
}

// InvokingUser is who runs agentkernel: under sudo the user who ran sudo
// (SUDO_UID, SUDO_GID), else the real ids of this process (as the native
// backend decides it).
func InvokingUser() (uid, gid int) {
	uid, gid = os.Getuid(), os.Getgid()
	if uid != 0 {
		return uid, gid
	}
	u, err1 := strconv.Atoi(os.Getenv("SUDO_UID"))
	g, err2 := strconv.Atoi(os.Getenv("SUDO_GID"))
	if err1 == nil && err2 == nil && u > 0 && g >= 0 {
		return u, g
	}
	return uid, gid
}

// Lease takes a block of host ids for one sandbox (held until the
// lease's Release or this process's end) and returns the invoking
// user's Owner over it.
func Lease() (Owner, *idrange.Lease, error) {
	l, err := idrange.Default().Acquire()
	if err != nil {
		return Owner{}, nil, fmt.Errorf("allocating the sandbox's host id range: %w", err)
	}
	uid, gid := InvokingUser()
	o := Owner{UID: uid, GID: gid, Base: l.Base}
	if err := o.check(); err != nil {
		l.Release()
		return Owner{}, nil, err
	}
	return o, l, nil
}

// Reserved is the invoking user's Owner over block base, one reserved
// for a persistent sandbox (idrange's Reserve): the same ids at each of
// its starts, held by the reservation rather than by this process.
func Reserved(base uint32) (Owner, error) {
	uid, gid := InvokingUser()
	o := Owner{UID: uid, GID: gid, Base: base}
	if err := o.check(); err != nil {
		return Owner{}, err
	}
	return o, nil
}

func (o Owner) check() error {
	in := func(id int) bool { return id > int(o.Base) && id < int(o.Base)+idrange.Size }
	switch {
	case o.UID < 0 || o.GID < 0:
		return fmt.Errorf("owner %d:%d is not a host user", o.UID, o.GID)
	case o.Base < idrange.First:
		return fmt.Errorf("host id block %d is below the sandboxes' range (%d)", o.Base, idrange.First)
	case in(o.UID) || in(o.GID):
		return fmt.Errorf("the invoking user %d:%d has ids inside the sandbox's host id range %d-%d", o.UID, o.GID, o.Base, o.Base+idrange.Size-1)
	}
	return nil
}

// maps are the user namespace's uid_map and gid_map.
func (o Owner) maps() (uidMap, gidMap string) {
	line := func(owner int) string {
		return strconv.Itoa(owner) + " 0 1\n" +
			strconv.FormatUint(uint64(o.Base)+1, 10) + " 1 " + strconv.Itoa(idrange.Size-1) + "\n"
	}
	return line(o.UID), line(o.GID)
}

// Userns makes a user namespace with o's maps and returns a descriptor
// of it (close-on-exec). Its one process is a child that execve stops
// (ptrace) before it runs anything, killed once the namespace is open.
func Userns(o Owner) (int, error) {
	if err := o.check(); err != nil {
		return -1, err
	}
	uidMap, gidMap := o.maps()
	// ptrace's tracer is a thread: the child is stopped, opened and
	// killed from this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return -1, err
	}
	defer devnull.Close()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"agentkernel-idmap"}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER,
			Ptrace:     true,
			Pdeathsig:  syscall.SIGKILL,
		},
	})
	if err != nil {
		return -1, fmt.Errorf("a user namespace for the idmapped mount: %w", err)
	}
	defer func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				return
			}
		}
	}()
	p := "/proc/" + strconv.Itoa(pid)
	if err := os.WriteFile(p+"/uid_map", []byte(uidMap), 0); err != nil {
		return -1, fmt.Errorf("the idmapped mount's uid map: %w", err)
	}
	if err := os.WriteFile(p+"/gid_map", []byte(gidMap), 0); err != nil {
		return -1, fmt.Errorf("the idmapped mount's gid map: %w", err)
	}
	fd, err := unix.Open(p+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("the idmapped mount's user namespace: %w", err)
	}
	return fd, nil
}

// Clone is a detached idmapped clone of src (a directory or a file, the
// mount it is on without the mounts below it) through userns, nosuid and
// nodev, read-only with ro: a descriptor for move_mount.
func Clone(src string, userns int, ro bool) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", src, err)
	}
	flags := uint64(unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if ro {
		flags |= unix.MOUNT_ATTR_RDONLY
	}
	attr := &unix.MountAttr{Attr_set: flags, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("idmapping %s (its file system must support idmapped mounts): %w", src, err)
		}
		return -1, fmt.Errorf("idmapping %s: %w", src, err)
	}
	return fd, nil
}

// Mount attaches at dst (an existing directory, or file for a file src)
// an idmapped clone of src for o: see the package's doc.
func Mount(src, dst string, o Owner) error {
	ns, err := Userns(o)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	fd, err := Clone(src, ns, false)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// MountPoint makes dst as a mount point for src: a directory for a
// directory, an empty file otherwise.
func MountPoint(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return os.Mkdir(dst, 0o700)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// MountIn is Mount of each srcs[i] on dsts[i] in the mount namespace of
// process pid (a container engine's daemon, which may have one of its
// own), its mount points already made. The clones are taken here, where
// the sources are the caller's paths, and attached there by a thread
// that enters that namespace and ends with the call. unmount detaches
// them again (the containers that bound them keep their own copies).
func MountIn(pid int, o Owner, srcs, dsts []string) (unmount func() error, err error) {
	ns, err := Userns(o)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ns)
	var trees []int
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	for _, src := range srcs {
		fd, err := Clone(src, ns, false)
		if err != nil {
			return nil, err
		}
		trees = append(trees, fd)
	}
	err = inMountNS(pid, func() error {
		for i, fd := range trees {
			if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dsts[i], unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				for _, d := range dsts[:i] {
					_ = unix.Unmount(d, unix.MNT_DETACH)
				}
				return fmt.Errorf("move_mount %s: %w", dsts[i], err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func() error {
		return inMountNS(pid, func() error {
			var errs []error
			for _, d := range dsts {
				if err := unix.Unmount(d, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
					errs = append(errs, fmt.Errorf("unmounting %s: %w", d, err))
				}
			}
			return errors.Join(errs...)
		})
	}, nil
}

// MountsUnder lists the mount points strictly below dir in the mount
// namespace of process pid, as its /proc/PID/mountinfo names them
// (relative to that process's root), deepest first.
func MountsUnder(pid int, dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return nil, err
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := UnescapeMount(f[4]); strings.HasPrefix(p, prefix) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out, nil
}

// UnescapeMount undoes mountinfo's octal escapes (\040 for a space) in
// a path field of /proc/PID/mountinfo (the native backend's cgroup
// lookup reads the file with it too).
func UnescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// UnmountIn detaches every mount at points (stacked ones too) in the
// mount namespace of process pid, never following a link at a path's
// last component. A point that is not (or no longer) a mount is no
// error.
func UnmountIn(pid int, points []string) error {
	return inMountNS(pid, func() error {
		var errs []error
		for _, p := range points {
			for n := 0; n < 64; n++ {
				err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
				if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
					break
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
					break
				}
			}
		}
		return errors.Join(errs...)
	})
}

// inMountNS runs f in the mount namespace of pid, on a thread of its own
// that enters it (even where it looks like this process's: the calling
// thread's may differ from the process's) and is never used again.
func inMountNS(pid int, f func() error) error {
	target := "/proc/" + strconv.Itoa(pid) + "/ns/mnt"
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, in the
		// other namespace.
		runtime.LockOSThread()
		fd, err := unix.Open(target, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("the engine's mount namespace: %w", err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- err
			return
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("entering the engine's mount namespace: %w", err)
			return
		}
		done <- f()
	}()
	return <-done
}
