package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DialHost opens a TCP connection to addr from the host's network, with
// TCP_NODELAY and keep-alive probes after keepIdle of silence (none when
// keepIdle is zero or less).
//
// It is the dial of every connection the sandbox makes, so it asks the
// kernel for no more than the connection needs: a non-blocking socket,
// its options, connect, and connect again to learn the outcome once the
// socket is writable (net.Dialer also asks for both of the socket's
// names), each a raw system call on a descriptor that never blocks
// (rawReadv). The connection's reads and writes are raw too; the
// descriptor waits in the runtime's poller like a net.Conn's.
func DialHost(ctx context.Context, addr netip.AddrPort, keepIdle time.Duration) (net.Conn, error) {
	a := addr.Addr().Unmap()
	var sa unsafe.Pointer
	var salen uintptr
	family := unix.AF_INET
	var sa4 unix.RawSockaddrInet4
	var sa6 unix.RawSockaddrInet6
	port := [2]byte{byte(addr.Port() >> 8), byte(addr.Port())}
	if a.Is4() {
		sa4.Family = unix.AF_INET
		sa4.Port = *(*uint16)(unsafe.Pointer(&port))
		sa4.Addr = a.As4()
		sa, salen = unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
	} else if a.Is6() {
		family = unix.AF_INET6
		sa6.Family = unix.AF_INET6
		sa6.Port = *(*uint16)(unsafe.Pointer(&port))
		sa6.Addr = a.As16()
		sa, salen = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	} else {
		return nil, fmt.Errorf("dial tcp %s: not an IP address", addr)
	}
	raddr := net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, addr.Port()))
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: raddr, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr(err)
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, opErr(os.NewSyscallError("socket", err))
	}
	secs := int(keepIdle / time.Second)
	opts := [...][3]int{{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1}, {unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1}, {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs}}
	nopts := len(opts)
	if secs <= 0 {
		nopts = 1
	}
	for _, o := range opts[:nopts] {
		if e := rawSetsockoptInt(fd, o[0], o[1], o[2]); e != nil {
			unix.Close(fd)
			return nil, opErr(os.NewSyscallError("setsockopt", e))
		}
	}
	_, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(sa), salen)
	if e != 0 && e != unix.EINPROGRESS && e != unix.EINTR {
		unix.Close(fd)
		return nil, opErr(os.NewSyscallError("connect", e))
	}
	f := os.NewFile(uintptr(fd), "tcp")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, opErr(err)
	}
	c := &hostConn{f: f, rc: rc, raddr: raddr}
	if e == 0 {
		return c, nil
	}
	// Ask connect again, now and each time the socket turns writable: 0
	// (or EISCONN) once the connection is made, EALREADY while it is
	// still being made, its failure otherwise. Asking before the first
	// wait matters: the poller forgets a readiness reported before the
	// wait began.
	if dl, ok := ctx.Deadline(); ok {
		f.SetWriteDeadline(dl)
	}
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Unix(1, 0)) })
	}
	var cerr error
	werr := rc.Write(func(fd uintptr) bool {
		_, _, e := unix.RawSyscall(unix.SYS_CONNECT, fd, uintptr(sa), salen)
		switch e {
		case 0, unix.EISCONN:
			return true
		case unix.EALREADY, unix.EINPROGRESS, unix.EINTR:
			return false
		}
		cerr = os.NewSyscallError("connect", e)
		return true
	})
	if !stop() || ctx.Err() != nil {
		f.Close()
		return nil, opErr(ctx.Err())
	}
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		f.Close()
		if errors.Is(werr, os.ErrDeadlineExceeded) {
			werr = context.DeadlineExceeded
		}
		return nil, opErr(werr)
	}
	if _, ok := ctx.Deadline(); ok {
		f.SetWriteDeadline(time.Time{})
	}
	return c, nil
}

func rawSetsockoptInt(fd, level, opt, value int) error {
	v := int32(value)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), 4, 0)
	if e != 0 {
		return e
	}
	return nil
}

// hostConn is a connection DialHost made.
type hostConn struct {
	f      *os.File
	rc     syscall.RawConn
	raddr  *net.TCPAddr
	closed atomic.Bool
}

func (c *hostConn) err(op string, err error) error {
	if c.closed.Load() {
		err = net.ErrClosed
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: c.raddr, Err: err}
}

func (c *hostConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var e error
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			n, e = rawRead(int(fd), p)
			if e != unix.EINTR {
				return e != unix.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, c.err("read", err)
	case e != nil:
		return 0, c.err("read", os.NewSyscallError("read", e))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *hostConn) Write(p []byte) (int, error) {
	var n int
	var e error
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, we := rawWrite(int(fd), p[n:])
			switch we {
			case nil:
				n += m
			case unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				e = we
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, c.err("write", err)
	case e != nil:
		return n, c.err("write", os.NewSyscallError("write", e))
	}
	return n, nil
}

func (c *hostConn) Close() error {
	if c.closed.Swap(true) {
		return c.err("close", net.ErrClosed)
	}
	return c.f.Close()
}

// CloseWrite shuts the connection's sending side down (an end of stream
// for the peer).
func (c *hostConn) CloseWrite() error {
	var e error
	if err := c.rc.Control(func(fd uintptr) { e = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return c.err("shutdown", err)
	}
	if e != nil {
		return c.err("shutdown", os.NewSyscallError("shutdown", e))
	}
	return nil
}

// SetLinger is net.TCPConn's: 0 makes Close send a reset.
func (c *hostConn) SetLinger(sec int) error {
	l := unix.Linger{}
	if sec >= 0 {
		l.Onoff, l.Linger = 1, int32(sec)
	}
	var e error
	if err := c.rc.Control(func(fd uintptr) { e = unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &l) }); err != nil {
		return c.err("set", err)
	}
	if e != nil {
		return c.err("set", os.NewSyscallError("setsockopt", e))
	}
	return nil
}

// LocalAddr asks the kernel for the socket's address (nobody on the
// connection's path needs it).
func (c *hostConn) LocalAddr() net.Addr {
	var addr net.Addr = &net.TCPAddr{}
	c.rc.Control(func(fd uintptr) {
		sa, err := unix.Getsockname(int(fd))
		if err != nil {
			return
		}
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			addr = &net.TCPAddr{IP: net.IP(sa.Addr[:]).To16(), Port: sa.Port}
		case *unix.SockaddrInet6:
			addr = &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}
		}
	})
	return addr
}

func (c *hostConn) RemoteAddr() net.Addr               { return c.raddr }
func (c *hostConn) SetDeadline(t time.Time) error      { return c.f.SetDeadline(t) }
func (c *hostConn) SetReadDeadline(t time.Time) error  { return c.f.SetReadDeadline(t) }
func (c *hostConn) SetWriteDeadline(t time.Time) error { return c.f.SetWriteDeadline(t) }

// SyscallConn gives the socket's descriptor to Control (as net.TCPConn
// does).
func (c *hostConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }
