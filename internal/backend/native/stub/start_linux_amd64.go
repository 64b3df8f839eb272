package stub

import (
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Linux constants package syscall lacks.
const (
	sysMemfdCreate  = 319 // amd64
	mfdCloexec      = 0x1
	mfdAllowSealing = 0x2
	fAddSeals       = 1033
	sealsAll        = 0x1 | 0x2 | 0x4 | 0x8 // seal, shrink, grow, write
)

// Start forks Binary from a sealed memfd as argv0, with files as the
// child's descriptors 0, 1, … and sys. The memfd goes in as one more of
// the child's files, and is exec'd under that number: ForkExec moves its
// own status pipe to the first number above every file it was given,
// which may be where the memfd is in a process with many descriptors
// coming and going. The stub's first script closes it (close_range).
func Start(argv0 string, files []uintptr, sys *syscall.SysProcAttr) (int, error) {
	if Binary == "" {
		return 0, syscall.ENOSYS
	}
	fd, err := binaryFd()
	if err != nil {
		return 0, err
	}
	n := len(files)
	path := "/proc/self/fd/" + itoa(n)
	return syscall.ForkExec(path, []string{argv0}, &syscall.ProcAttr{Env: []string{}, Files: append(files[:n:n], uintptr(fd)), Sys: sys})
}

// memfd is the sealed memfd holding Binary plus one (0: not made yet).
// It is made once per process and kept open (close-on-exec): a run
// starts the stub twice (PID 1, the exec stage) and a daemon many times,
// and each memfd made, written and sealed cost a shmem inode and four
// system calls.
var memfd atomic.Int64

func binaryFd() (int, error) {
	if v := memfd.Load(); v > 0 {
		return int(v - 1), nil
	}
	name := [...]byte{'a', 'g', 'e', 'n', 't', 'k', 'e', 'r', 'n', 'e', 'l', '-', 's', 't', 'u', 'b', 0}
	r, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(&name[0])), mfdCloexec|mfdAllowSealing, 0)
	if errno != 0 {
		return -1, errno
	}
	fd := int(r)
	if _, err := syscall.Write(fd, []byte(Binary)); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	// Sealed, nobody (not a stub that kept it open) can change what the
	// next stub runs.
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fAddSeals, sealsAll); errno != 0 {
		syscall.Close(fd)
		return -1, errno
	}
	if !memfd.CompareAndSwap(0, int64(fd)+1) {
		syscall.Close(fd) // another Start made one meanwhile
		return int(memfd.Load() - 1), nil
	}
	return fd, nil
}

// itoa is strconv.Itoa for a descriptor number (this package imports
// only syscall).
func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}
