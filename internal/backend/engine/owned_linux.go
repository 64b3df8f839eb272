package engine

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/hostidmap"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ownedBinds shows the engine spec's writable binds as native shows
// them: each source through an idmapped clone (package hostidmap) in
// which the container's root, host root on a rootful engine, stands for
// the invoking user and id n for n of a block of host ids leased for the
// sandbox, so whatever the container writes or chowns there lands on the
// invoking user or that block, and the clone is nosuid and nodev. The
// clones are attached in the engine daemon's mount namespace (found by
// its socket's peer), on directories of their own under DataDir/engine,
// and the returned spec names them. unmount detaches them, once the
// container has started (its mounts are its own copies by then);
// release gives the block back, at the sandbox's end. A persistent
// sandbox's block is reserved (not 0): the same at each of its starts,
// so that what it chowned keeps its ids; release then gives nothing
// back (the sandbox's removal does). A spec without a writable bind, or
// of a caller that is not root (whose engine can only be rootless), is
// returned as it is.
func (b *Backend) ownedBinds(spec *sandbox.Spec, reserved uint32) (out *sandbox.Spec, unmount, release func(), err error) {
	nothing := func() {}
	var idx []int
	for i, m := range spec.Mounts {
		if m.Kind == sandbox.MountBind && !m.ReadOnly {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 || os.Geteuid() != 0 {
		// Not root: the engine is rootless (its daemon ours), and its
		// user namespace already maps the container's root to us.
		return spec, nothing, nothing, nil
	}
	fail := func(err error) (*sandbox.Spec, func(), func(), error) {
		return nil, nil, nil, fmt.Errorf("backend %s: a writable host directory as the invoking user's: %w", b.name, err)
	}
	if !strings.HasPrefix(b.host, "unix://") {
		return nil, nil, nil, b.unsupported("the engine at %s is not local (a unix socket): its containers cannot be given a writable host directory as the invoking user's; make the workspace read-only or copy-on-write (-p moderate)", b.host)
	}
	pid, err := b.daemonPid()
	if err != nil {
		return fail(err)
	}
	var owner hostidmap.Owner
	var lease *idrange.Lease // nil: nothing to release
	if reserved != 0 {
		owner, err = hostidmap.Reserved(reserved)
	} else {
		owner, lease, err = hostidmap.Lease()
	}
	if err != nil {
		return fail(err)
	}
	base := os.TempDir()
	if b.opts.DataDir != "" {
		base = filepath.Join(b.opts.DataDir, "engine")
		if err := os.MkdirAll(base, 0o700); err != nil {
			lease.Release()
			return fail(err)
		}
	}
	dir, err := os.MkdirTemp(base, ownedPrefix)
	if err != nil {
		lease.Release()
		return fail(err)
	}
	// Held until the directory is gone: gc leaves it alone meanwhile.
	lock, err := lockOwned(dir)
	if err != nil {
		_ = os.Remove(dir)
		lease.Release()
		return fail(err)
	}
	// Never RemoveAll: a mount point still mounted holds the project.
	removeDir := func(points []string) {
		for _, p := range points {
			_ = os.Remove(p)
		}
		_ = os.Remove(filepath.Join(dir, ownedLock))
		if err := os.Remove(dir); err != nil {
			b.opts.Warn(fmt.Sprintf("backend %s: removing %s: %v", b.name, dir, err))
		}
		lock.Close()
	}
	c := *spec
	c.Mounts = slices.Clone(spec.Mounts)
	var srcs, dsts []string
	for _, i := range idx {
		dst := filepath.Join(dir, strconv.Itoa(i))
		if err := hostidmap.MountPoint(c.Mounts[i].Source, dst); err != nil {
			removeDir(dsts)
			lease.Release()
			return fail(err)
		}
		srcs, dsts = append(srcs, c.Mounts[i].Source), append(dsts, dst)
		c.Mounts[i].Source = dst
	}
	detach, err := hostidmap.MountIn(pid, owner, srcs, dsts)
	if err != nil {
		removeDir(dsts)
		lease.Release()
		return fail(err)
	}
	done := false
	unmount = func() {
		if done {
			return
		}
		done = true
		if err := detach(); err != nil {
			b.opts.Warn(fmt.Sprintf("backend %s: %v (left in place for agentkernel gc: %s)", b.name, err, dir))
			lock.Close()
			return
		}
		removeDir(dsts)
	}
	return &c, unmount, lease.Release, nil
}

// An owned directory (ownedBinds) is DataDir/engine/owned.<random>: one
// mount point per writable bind, named by the mount's index, and the
// lock file ownedLock, which the process that made it holds (flock)
// until the directory is gone. One whose lock is free was left by a
// process that died (killed mid-run): GCOwned removes it, its mounts in
// the engine daemon's namespace first.
const (
	ownedPrefix = "owned."
	ownedLock   = "lock"
	// ownedGrace protects an owned directory without its lock file
	// yet: its run is making it.
	ownedGrace = 30 * time.Second
)

// lockOwned makes dir's lock file and takes its lock.
func lockOwned(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, ownedLock), os.O_CREATE|os.O_EXCL|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// gcOwned removes the owned directories under dataDir/engine whose
// process died, with their mounts in this process's mount namespace and
// in those of the engine daemons daemons (pids). It never descends into
// a mount point (each is removed with rmdir or unlink, which refuse one
// still mounted here and detach one mounted in another namespace) and
// never follows a link: what a directory holds beside its mount points
// and lock file is left, and the directory with it.
func gcOwned(dataDir string, daemons []int) (removed []string, err error) {
	if dataDir == "" {
		return nil, nil
	}
	base := filepath.Join(dataDir, "engine")
	ents, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	namespaces := mountNamespaces(append([]int{os.Getpid()}, daemons...))
	var errs []error
	for _, e := range ents {
		// ReadDir's types are lstat's: a link is never a directory here.
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ownedPrefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		lock, err := os.OpenFile(filepath.Join(dir, ownedLock), os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if fi, err := os.Lstat(dir); err != nil || time.Since(fi.ModTime()) < ownedGrace {
				continue
			}
		case err != nil:
			errs = append(errs, err)
			continue
		default:
			if flock(lock, unix.LOCK_EX|unix.LOCK_NB) != nil {
				lock.Close() // its run goes on
				continue
			}
		}
		for _, pid := range namespaces {
			points, err := hostidmap.MountsUnder(pid, dir)
			if err != nil || len(points) == 0 {
				continue
			}
			if err := hostidmap.UnmountIn(pid, points); err != nil {
				errs = append(errs, err)
				continue
			}
			for _, p := range points {
				removed = append(removed, fmt.Sprintf("mount %s (in process %d's mount namespace)", p, pid))
			}
		}
		if err := removeOwned(dir); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, dir)
		}
		if lock != nil {
			lock.Close()
		}
	}
	return removed, errors.Join(errs...)
}

// removeOwned removes an owned directory's mount points and lock file,
// then the directory: nothing else, never recursively.
func removeOwned(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if name == ownedLock {
			continue // last: until then gc judges the directory by it
		}
		if _, err := strconv.Atoi(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: not agentkernel's, left in place", filepath.Join(dir, name)))
			continue
		}
		// rmdir or unlink of the entry itself.
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.Remove(filepath.Join(dir, ownedLock)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Remove(dir)
}

// mountNamespaces keeps one process of each mount namespace of pids.
func mountNamespaces(pids []int) []int {
	var out []int
	seen := map[uint64]bool{}
	for _, pid := range pids {
		var st unix.Stat_t
		if unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/mnt", &st) != nil || seen[st.Ino] {
			continue
		}
		seen[st.Ino] = true
		out = append(out, pid)
	}
	return out
}

// daemonPid is the engine daemon's process, the peer of its local
// socket: the one whose mount namespace its containers' binds are
// resolved in.
func (b *Backend) daemonPid() (int, error) {
	path, ok := strings.CutPrefix(b.host, "unix://")
	if !ok {
		return 0, fmt.Errorf("the engine at %s is not local (a unix socket)", b.host)
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		return 0, fmt.Errorf("the engine's socket: %w", err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("the engine's process: %w", cerr)
	}
	if cred.Pid <= 0 {
		return 0, errors.New("the engine's socket names no process")
	}
	return int(cred.Pid), nil
}
