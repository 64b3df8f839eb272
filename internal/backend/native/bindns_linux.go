package native

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Writable host directories (a permissive /workspace, `-v DIR:DEST` read
// and write) are idmapped through a user namespace of their own, made
// once per sandbox, rather than through the command's: in it the
// sandbox's root (host RootUID) stands for the invoking user (Owner), and
// every other id of the sandbox's block for itself. So whatever the
// sandbox does, a file it creates or chowns in a host directory ends up
// owned by the invoking user or by an id of the sandbox's own block,
// never by another host user (through the command's namespace a chown to
// 1001 inside was host uid 1001 outside). Files of other host users in
// the directory show as nobody inside and keep their owners.
//
//	uid_map / gid_map of that namespace (inside, outside, count):
//	  Owner     RootUID    1
//	  RootUID+1 RootUID+1  subIDSize-1

// argv0Userns is agentkernel re-executed only to be a user namespace's
// first process, where there is no stub to do it (ownerUserns).
const argv0Userns = "agentkernel:userns"

// usernsMain is that process: it waits until its parent has opened the
// namespace and closes fd 3.
func usernsMain() int {
	_, _ = io.Copy(io.Discard, os.NewFile(fdConfig, "wait"))
	return 0
}

// ownerUserns returns (making it on first use) the user namespace that
// writable host directories are idmapped through.
func (s *initState) ownerUserns() (int, error) {
	if s.ownerNsFd >= 0 {
		return s.ownerNsFd, nil
	}
	owner, group := s.cfg.OwnerUID, s.cfg.OwnerGID
	inBlock := func(id, base int) bool { return id > base && id < base+subIDSize }
	if inBlock(owner, s.cfg.RootUID) || inBlock(group, s.cfg.RootGID) {
		return -1, fmt.Errorf("the invoking user %d:%d has ids inside the sandbox's host uid range %d-%d", owner, group, s.cfg.RootUID, s.cfg.RootUID+subIDSize-1)
	}
	uidMap := strconv.Itoa(owner) + " " + strconv.Itoa(s.cfg.RootUID) + " 1\n" +
		strconv.Itoa(s.cfg.RootUID+1) + " " + strconv.Itoa(s.cfg.RootUID+1) + " " + strconv.Itoa(subIDSize-1) + "\n"
	gidMap := strconv.Itoa(group) + " " + strconv.Itoa(s.cfg.RootGID) + " 1\n" +
		strconv.Itoa(s.cfg.RootGID+1) + " " + strconv.Itoa(s.cfg.RootGID+1) + " " + strconv.Itoa(subIDSize-1) + "\n"
	fd, err := makeUserns(s.proc, uidMap, gidMap, execStub != "" && !s.cfg.GoExecStage)
	if err != nil {
		return -1, fmt.Errorf("user namespace for writable host directories: %w", err)
	}
	s.ownerNsFd = fd
	return fd, nil
}

// makeUserns makes a user namespace with the given id maps and returns a
// descriptor of it: a child (the stub, or agentkernel re-executed when
// useStub is false) enters a new one and waits while the maps are
// written (through proc, where the child's pid is found) and the
// namespace opened, then ends.
func makeUserns(proc, uidMap, gidMap string, useStub bool) (int, error) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	parent, child := os.NewFile(uintptr(sp[0]), "userns"), os.NewFile(uintptr(sp[1]), "userns-child")
	defer parent.Close()
	var pid int
	if useStub {
		// The script sets the parent death signal: Go's fork checks it
		// against the parent's pid, which a child forked into a PID
		// namespace that its parent's thread unshared (thread_linux.go)
		// does not see.
		pid, err = startStub(argv0Userns, []uintptr{child.Fd(), child.Fd(), child.Fd(), child.Fd(), child.Fd()}, &syscall.SysProcAttr{})
		child.Close()
		if err != nil {
			return -1, err
		}
		s := &stubScript{dataOff: stubHeader + 7*stubRecSize}
		s.add("parent death signal", unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, int(unix.SIGKILL), 0, 0, 0)
		i := s.add("closing inherited descriptors", unix.SYS_CLOSE_RANGE, fdErr+1, ^uint64(0), 0)
		s.recs[i].flags |= stubIgnore
		s.add("entering a user namespace", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
		s.add("reporting ready", unix.SYS_WRITE, fdConfig, uint64(stubBase), 1)
		i = s.add("waiting", unix.SYS_READ, fdConfig, s.bytes(make([]byte, 8)), 8)
		s.recs[i].flags |= stubIgnore
		s.add("exiting", unix.SYS_EXIT_GROUP, 0)
		b, err := s.encode()
		if err == nil {
			_, err = parent.Write(b)
		}
		var ready [1]byte
		if err == nil {
			_, err = io.ReadFull(parent, ready[:])
		}
		if err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			for {
				if _, werr := unix.Wait4(pid, &ws, 0, nil); werr != unix.EINTR {
					break
				}
			}
			return -1, fmt.Errorf("the namespace's first process failed (it ended with status %#x): %w", uint32(ws), err)
		}
	} else {
		// Not Go's UidMappings: it writes them through /proc, which is
		// not where the sandbox's proc is once it moved into the new root.
		// The child waits on fd 3 while the maps are written here.
		pid, err = syscall.ForkExec("/proc/self/exe", []string{argv0Userns}, &syscall.ProcAttr{
			Env:   []string{},
			Files: []uintptr{^uintptr(0), ^uintptr(0), ^uintptr(0), child.Fd()},
			Sys:   &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER},
		})
		child.Close()
		if err != nil {
			return -1, err
		}
	}
	defer reap(pid)
	defer unix.Kill(pid, unix.SIGKILL)
	p := proc + "/" + strconv.Itoa(pid)
	if err := os.WriteFile(p+"/uid_map", []byte(uidMap), 0); err != nil {
		return -1, err
	}
	if err := os.WriteFile(p+"/gid_map", []byte(gidMap), 0); err != nil {
		return -1, err
	}
	return unix.Open(p+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// reap collects a child's status, retrying on EINTR.
func reap(pid int) {
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
			return
		}
	}
}
