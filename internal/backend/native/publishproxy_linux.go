package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Published ports in proxy mode. The network helper has no way into a
// sandbox that has no TUN device, so each connection to a published port
// is made by the sandbox's owner, inside the sandbox's network namespace,
// to 127.0.0.1 (or ::1) and the port, and handed to the helper
// (netproc.Config.Dial), which splices it to the host's connection. The
// owner dials only the sandbox ports the spec publishes: nothing else in
// the sandbox's namespace is reachable that way, whatever the helper
// asks.
//
// As root the owner enters the namespace on a thread of its own, which
// ends with the dial. Rootless, a multi-threaded process cannot enter the
// sandbox's user namespace, which the network namespace belongs to: the
// stub (single-threaded) does it, makes the connection and passes it
// back over a socket.

// publishDialTimeout bounds one connection into the sandbox.
const publishDialTimeout = 10 * time.Second

// nsHandle is a handle on a sandbox's network namespace that dials in
// progress hold (read lock) while stopNetwork closes it (write lock): its
// descriptor's number is never used after it is closed.
type nsHandle struct {
	mu sync.RWMutex
	f  *os.File
}

func (h *nsHandle) close() {
	h.mu.Lock()
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
	h.mu.Unlock()
}

// proxyDial returns the Dial of a sandbox in proxy mode: ns is a handle
// on the sandbox's network namespace, taken over (a pidfd of a process
// in it; as root, a namespace descriptor will do too), closed with the
// network helper (stopNetwork).
func (r *runState) proxyDial(ns *os.File, rootless bool) func(uint16) (*os.File, error) {
	h := &nsHandle{f: ns}
	r.netMu.Lock()
	old := r.netNS
	r.netNS = h
	r.netMu.Unlock()
	if old != nil {
		old.close()
	}
	return func(port uint16) (*os.File, error) {
		h.mu.RLock()
		defer h.mu.RUnlock()
		if h.f == nil {
			return nil, errors.New("the sandbox's network is stopping")
		}
		fd := int(h.f.Fd())
		var f *os.File
		var err error
		if rootless {
			f, err = dialByStub(fd, port)
		} else {
			f, err = dialOnThread(fd, port)
		}
		if err != nil {
			return nil, fmt.Errorf("connecting to port %d in the sandbox: %w", port, err)
		}
		return f, nil
	}
}

// loopbacks are where a published port is dialled in the sandbox: IPv4
// first, then IPv6 for a server that listens on ::1 only.
var loopbacks = [...]struct {
	family int
	addr   []byte
}{
	{unix.AF_INET, []byte{127, 0, 0, 1}},
	{unix.AF_INET6, []byte{15: 1}},
}

// tryNext says whether a failed dial may succeed on the next loopback.
func tryNext(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.ENETUNREACH)
}

// dialOnThread connects to port from a thread that enters the network
// namespace ns (setns: a namespace descriptor or a pidfd) and ends with
// the dial.
func dialOnThread(ns int, port uint16) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, now in the sandbox's namespace,
		// ends with this goroutine.
		runtime.LockOSThread()
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("entering the sandbox's network namespace: %w", err)}
			return
		}
		var err error
		for _, l := range loopbacks {
			var f *os.File
			if f, err = connectTimeout(l.family, l.addr, port); err == nil {
				ch <- result{f: f}
				return
			}
			if !tryNext(err) {
				break
			}
		}
		ch <- result{err: err}
	}()
	r := <-ch
	return r.f, r.err
}

// connectTimeout connects a new TCP socket of family to addr:port,
// waiting at most publishDialTimeout.
func connectTimeout(family int, addr []byte, port uint16) (*os.File, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET {
		sa4 := &unix.SockaddrInet4{Port: int(port)}
		copy(sa4.Addr[:], addr)
		sa = sa4
	} else {
		sa6 := &unix.SockaddrInet6{Port: int(port)}
		copy(sa6.Addr[:], addr)
		sa = sa6
	}
	err = unix.Connect(fd, sa)
	if err == unix.EINPROGRESS || err == unix.EINTR {
		deadline := time.Now().Add(publishDialTimeout)
		for {
			left := time.Until(deadline)
			if left <= 0 {
				err = unix.ETIMEDOUT
				break
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			n, perr := unix.Poll(pfd, int(left/time.Millisecond)+1)
			if perr == unix.EINTR || (perr == nil && n == 0) {
				continue
			}
			if perr != nil {
				err = perr
				break
			}
			soerr, gerr := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			switch {
			case gerr != nil:
				err = gerr
			case soerr != 0:
				err = syscall.Errno(soerr)
			default:
				err = nil
			}
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "sandbox port"), nil
}

// dialByStub connects to port from a stub that enters the user and
// network namespaces of the process pidfd refers to.
func dialByStub(pidfd int, port uint16) (*os.File, error) {
	var err error
	for _, l := range loopbacks {
		var f *os.File
		if f, err = stubConnect(pidfd, l.family, l.addr, port); err == nil {
			return f, nil
		}
		if !tryNext(err) {
			break
		}
	}
	return nil, err
}

// stubConnect runs the stub's script: enter the namespaces, make a TCP
// socket (a send timeout bounds its connect), connect it and send it on
// fd 3 (SCM_RIGHTS). The pidfd is the stub's fd 5.
func stubConnect(pidfd, family int, addr []byte, port uint16) (*os.File, error) {
	s := &stubScript{recs: make([]stubRecord, 0, 8), dataOff: 1024}
	s.add("entering the sandbox's namespaces", unix.SYS_SETNS, 5, unix.CLONE_NEWUSER|unix.CLONE_NEWNET)
	sock := s.add("socket", unix.SYS_SOCKET, family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	s.add("send timeout", unix.SYS_SETSOCKOPT, ref(sock), unix.SOL_SOCKET, unix.SO_SNDTIMEO, s.bytes(u64s(uint64(publishDialTimeout/time.Second), 0)), 16)
	var sa []byte
	if family == unix.AF_INET {
		sa = make([]byte, 16)
		binary.LittleEndian.PutUint16(sa, unix.AF_INET)
		binary.BigEndian.PutUint16(sa[2:], port)
		copy(sa[4:], addr)
	} else {
		sa = make([]byte, 28)
		binary.LittleEndian.PutUint16(sa, unix.AF_INET6)
		binary.BigEndian.PutUint16(sa[2:], port)
		copy(sa[8:], addr)
	}
	s.add("connect", unix.SYS_CONNECT, ref(sock), s.bytes(sa), len(sa))
	// struct cmsghdr (len, level, type) and one descriptor, poked in.
	cmsg := make([]byte, unix.CmsgSpace(4))
	binary.LittleEndian.PutUint64(cmsg, uint64(unix.CmsgLen(4)))
	binary.LittleEndian.PutUint32(cmsg[8:], unix.SOL_SOCKET)
	binary.LittleEndian.PutUint32(cmsg[12:], unix.SCM_RIGHTS)
	cm := s.bytes(cmsg)
	s.add("passing the connection", stubPoke, cm+16, ref(sock))
	iov := s.bytes(u64s(s.bytes([]byte{'C'}), 1))
	// struct msghdr: name, namelen, iov, iovlen, control, controllen, flags.
	msg := s.bytes(u64s(0, 0, iov, 1, cm, uint64(len(cmsg)), 0))
	s.add("passing the connection", unix.SYS_SENDMSG, 3, msg, 0)
	script, err := s.encode()
	if err != nil {
		return nil, err
	}

	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(sp[0])
	errR, errW, err := os.Pipe()
	if err != nil {
		unix.Close(sp[1])
		return nil, err
	}
	defer errR.Close()
	closed := ^uintptr(0)
	pid, err := startStub(argv0Exec, []uintptr{closed, closed, closed, uintptr(sp[1]), errW.Fd(), uintptr(pidfd)}, &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL})
	unix.Close(sp[1])
	errW.Close()
	if errors.Is(err, syscall.ENOSYS) {
		return nil, errors.New("rootless, published ports without a TUN device need the exec stub, which this architecture lacks")
	}
	if err != nil {
		return nil, fmt.Errorf("starting the stub: %w", err)
	}
	defer reap(pid)
	tv := unix.NsecToTimeval(int64(publishDialTimeout + 5*time.Second))
	_ = unix.SetsockoptTimeval(sp[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if _, err := unix.Write(sp[0], script); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return nil, fmt.Errorf("the stub's script: %w", err)
	}
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(sp[0], b[:], oob, unix.MSG_CMSG_CLOEXEC)
	for err == unix.EINTR {
		n, oobn, _, _, err = unix.Recvmsg(sp[0], b[:], oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return nil, err
	}
	if n == 1 && oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil && len(msgs) == 1 {
			if fds, perr := unix.ParseUnixRights(&msgs[0]); perr == nil && len(fds) == 1 {
				return os.NewFile(uintptr(fds[0]), "sandbox port"), nil
			}
		}
	}
	// The stub failed: its report says where and why.
	var rep [16]byte
	if k, _ := io.ReadFull(errR, rep[:]); k == len(rep) {
		idx := binary.LittleEndian.Uint64(rep[:])
		errno := syscall.Errno(binary.LittleEndian.Uint64(rep[8:]))
		if idx < uint64(len(s.recs)) {
			if d := s.recs[idx].desc; d != "connect" && d != "socket" {
				return nil, fmt.Errorf("%s: %w", d, errno)
			}
		}
		return nil, errno
	}
	return nil, errors.New("the stub ended without a connection")
}

// DialLoopback connects to port on the sandbox's own loopback (127.0.0.1,
// then ::1), from inside its network namespace, entered through PID 1's
// pidfd: what a forwarded port (ssh -L) reaches. Nothing of the host's
// network is reachable this way.
func (i *Instance) DialLoopback(port uint16) (*os.File, error) {
	if i.pidfd < 0 {
		return nil, errors.New("the sandbox has stopped")
	}
	var f *os.File
	var err error
	if i.rootless {
		f, err = dialByStub(i.pidfd, port)
	} else {
		f, err = dialOnThread(i.pidfd, port)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to port %d in the sandbox: %w", port, err)
	}
	return f, nil
}
