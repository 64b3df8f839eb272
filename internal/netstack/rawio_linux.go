package netstack

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawReadv and rawWritev are readv(2) and writev(2) on a non-blocking
// descriptor as raw system calls: the call returns at once (EAGAIN
// rather than waiting), so the runtime is not told about it. A call the
// runtime is told about and that lasts longer than its monitor's tick
// (the sandbox's kernel receives what the stack writes within the
// writev, the host's kernel sends within a socket's write) has its P
// handed to another thread, which is woken for nothing: with the
// helper's one P, the thread in the call is the only one with work.
func rawReadv(fd int, iov [][]byte) (int, error) {
	var vecs [4]unix.Iovec
	return rawIovec(unix.SYS_READV, fd, iov, vecs[:0])
}

func rawWritev(fd int, iov [][]byte) (int, error) {
	var vecs [16]unix.Iovec
	return rawIovec(unix.SYS_WRITEV, fd, iov, vecs[:0])
}

func rawIovec(trap uintptr, fd int, iov [][]byte, vecs []unix.Iovec) (int, error) {
	for _, b := range iov {
		if len(b) == 0 {
			continue
		}
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		vecs = append(vecs, v)
	}
	var p unsafe.Pointer
	if len(vecs) > 0 {
		p = unsafe.Pointer(&vecs[0])
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(len(vecs)))
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

// rawRead and rawWrite are read(2) and write(2) on a non-blocking
// descriptor as raw system calls (see rawReadv).
func rawRead(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

func rawWrite(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

// errnoErr returns the common errors without allocating, and the same
// values (unix.EAGAIN, unix.EINTR) that callers compare against.
func errnoErr(e syscall.Errno) error {
	switch e {
	case unix.EAGAIN:
		return unix.EAGAIN
	case unix.EINTR:
		return unix.EINTR
	}
	return e
}
