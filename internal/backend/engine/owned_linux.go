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

	"golang.org/x/sys/unix"

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
// release gives the block back, at the sandbox's end. A spec without a
// writable bind, or of a caller that is not root (whose engine can only
// be rootless), is returned as it is.
func (b *Backend) ownedBinds(spec *sandbox.Spec) (out *sandbox.Spec, unmount, release func(), err error) {
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
	owner, lease, err := hostidmap.Lease()
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
	dir, err := os.MkdirTemp(base, "owned.")
	if err != nil {
		lease.Release()
		return fail(err)
	}
	// Never RemoveAll: a mount point still mounted holds the project.
	removeDir := func(points []string) {
		for _, p := range points {
			_ = os.Remove(p)
		}
		if err := os.Remove(dir); err != nil {
			b.opts.Warn(fmt.Sprintf("backend %s: removing %s: %v", b.name, dir, err))
		}
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
			b.opts.Warn(fmt.Sprintf("backend %s: %v (left in place: %s)", b.name, err, dir))
			return
		}
		removeDir(dsts)
	}
	return &c, unmount, lease.Release, nil
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
