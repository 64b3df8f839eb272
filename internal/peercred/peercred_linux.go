package peercred

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The pidfd ioctls that open a process's namespaces (linux/pidfd.h,
// Linux 6.11): _IO(PIDFS_IOCTL_MAGIC, nr) with PIDFS_IOCTL_MAGIC 0xFF,
// nr 5 for the PID namespace and 9 for the user namespace. _IO's
// direction bits differ between architectures; NS_GET_USERNS is an _IO
// too, so its high bits are this architecture's.
const (
	iocNone               = unix.NS_GET_USERNS &^ 0xffff
	pidfdGetPIDNamespace  = iocNone | 0xff<<8 | 5
	pidfdGetUserNamespace = iocNone | 0xff<<8 | 9
)

// nsID identifies a namespace: its nsfs inode.
type nsID struct{ dev, ino uint64 }

func (n nsID) zero() bool { return n == nsID{} }

// namespaces are a process's user and PID namespaces.
type namespaces struct{ user, pid nsID }

// Self is this process's user and PID namespaces, read once: they do
// not change while it runs (a process with more than one thread cannot
// enter or make another user namespace, and none changes its own PID
// namespace).
type Self struct {
	ns  namespaces
	err error
}

// ReadSelf reads this process's namespaces from /proc/self/ns. When that
// fails, Self.Of says so in every peer's NSErr and no peer is in its
// namespaces.
func ReadSelf() Self {
	ns, err := ownNamespaces()
	return Self{ns, err}
}

// Of reads the peer of the connected unix socket c (ReadSelf().Of).
func Of(c syscall.Conn) (Peer, error) { return ReadSelf().Of(c) }

// Of reads the peer of the connected unix socket c. An error means not
// even its uid could be read; a peer whose namespaces cannot be
// established comes back with OwnNS false and NSErr set.
func (s Self) Of(c syscall.Conn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{UID: -1}, err
	}
	var p Peer
	var perr error
	if err := raw.Control(func(fd uintptr) { p, perr = s.ofFD(int(fd)) }); err != nil {
		return Peer{UID: -1}, err
	}
	return p, perr
}

// ofFD is Of on a socket descriptor.
func (s Self) ofFD(fd int) (Peer, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Peer{UID: -1}, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	p := Peer{UID: int(cred.Uid), PID: int(cred.Pid)}
	if s.err != nil || s.ns.user.zero() || s.ns.pid.zero() {
		p.NSErr = s.err
		if p.NSErr == nil {
			p.NSErr = errors.New("this process's namespaces are unknown")
		}
		return p, nil
	}
	theirs, err := peerNamespaces(fd, p.PID)
	switch {
	case err != nil:
		p.NSErr = err
	case theirs.user != s.ns.user || theirs.pid != s.ns.pid || theirs.user.zero() || theirs.pid.zero():
		p.NSErr = ErrOtherNamespace
	default:
		p.OwnNS = true
	}
	return p, nil
}

// ownNamespaces are this process's.
func ownNamespaces() (namespaces, error) {
	user, err := statNS("/proc/self/ns/user")
	if err != nil {
		return namespaces{}, fmt.Errorf("this process's user namespace: %w", err)
	}
	pid, err := statNS("/proc/self/ns/pid")
	if err != nil {
		return namespaces{}, fmt.Errorf("this process's PID namespace: %w", err)
	}
	return namespaces{user, pid}, nil
}

func statNS(path string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// peerNamespaces are the namespaces of the socket fd's peer (pid: the
// peer's pid here, from SO_PEERCRED). Race-free: the pidfd the kernel
// took at connect time (SO_PEERPIDFD, Linux 6.5) names the peer itself,
// and its namespaces are opened through it (Linux 6.11). Where the
// ioctls are missing, /proc/<pid>/ns is read and the pidfd then proves
// the peer still lived, so the pid was not another process's. Without
// SO_PEERPIDFD only /proc/<pid>/ns is left.
func peerNamespaces(fd, pid int) (namespaces, error) {
	pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err != nil {
		if !errors.Is(err, unix.ENOPROTOOPT) {
			return namespaces{}, fmt.Errorf("SO_PEERPIDFD: %w", err)
		}
		return procNamespaces(pid)
	}
	defer unix.Close(pidfd)
	ns, err := pidfdNamespaces(pidfd)
	if !ioctlMissing(err) {
		return ns, err
	}
	if ns, err = procNamespaces(pid); err != nil {
		return ns, err
	}
	if exited(pidfd) {
		return namespaces{}, errors.New("the peer exited")
	}
	return ns, nil
}

// ioctlMissing: a kernel without the pidfd namespace ioctls.
func ioctlMissing(err error) bool {
	return errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)
}

// pidfdNamespaces opens the process's namespaces through its pidfd.
func pidfdNamespaces(pidfd int) (namespaces, error) {
	user, err := pidfdNS(pidfd, pidfdGetUserNamespace)
	if err != nil {
		return namespaces{}, err
	}
	pid, err := pidfdNS(pidfd, pidfdGetPIDNamespace)
	if err != nil {
		return namespaces{}, err
	}
	return namespaces{user, pid}, nil
}

func pidfdNS(pidfd int, req uint) (nsID, error) {
	nsfd, err := unix.IoctlRetInt(pidfd, req)
	if err != nil {
		return nsID{}, err
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// procNamespaces reads the namespaces of pid (in this PID namespace)
// from /proc.
func procNamespaces(pid int) (namespaces, error) {
	if pid <= 0 {
		return namespaces{}, errors.New("the peer has no pid in this PID namespace")
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/ns/"
	user, err := statNS(dir + "user")
	if err != nil {
		return namespaces{}, fmt.Errorf("the peer's user namespace: %w", err)
	}
	pidNS, err := statNS(dir + "pid")
	if err != nil {
		return namespaces{}, fmt.Errorf("the peer's PID namespace: %w", err)
	}
	return namespaces{user, pidNS}, nil
}

// exited reports whether the pidfd's process has exited (its pidfd is
// readable then); an error counts as exited.
func exited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n != 0
	}
}
