package netproc

import (
	"errors"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Helper is a sandbox's network helper as its owner holds it: started at
// once (Start) or on first use (StartLazy).
type Helper interface {
	// Ready waits until the helper serves the sandbox.
	Ready() error
	// Close stops it and returns its report.
	Close() (Report, error)
}

// Lazy is a helper that starts when the sandbox first sends a packet (or,
// in proxy mode, first connects to its proxy): a run that never uses its
// network does not pay for the helper's start. Until then the device is
// only polled, never read: what the sandbox sends waits in it.
type Lazy struct {
	exe    string
	cfg    Config
	onDeny func(Denial)

	// dev is a non-blocking duplicate of the device in the runtime's
	// poller: waiting for the sandbox's first packet takes no thread, and
	// closing it ends the wait.
	dev     *os.File
	rc      syscall.RawConn
	watched chan struct{}

	mu     sync.Mutex
	p      *Proc
	err    error
	closed bool
}

// StartLazy watches dev and starts the helper (Start) the first time it
// has something to read. It takes dev over.
func StartLazy(exe string, dev *os.File, cfg Config, onDeny func(Denial)) (*Lazy, error) {
	fd, err := unix.FcntlInt(dev.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	dev.Close()
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "network device")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	l := &Lazy{exe: exe, cfg: cfg, onDeny: onDeny, dev: f, rc: rc, watched: make(chan struct{})}
	go l.watch()
	return l, nil
}

func (l *Lazy) watch() {
	defer close(l.watched)
	err := l.rc.Read(func(fd uintptr) bool {
		// Readable now? Otherwise the poller waits for it.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0
	})
	if err != nil {
		return // closed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.dev == nil {
		return
	}
	dev := l.dev
	l.dev = nil
	l.p, l.err = Start(l.exe, dev, l.cfg, l.onDeny)
}

// Ready waits until the helper serves the sandbox; before the sandbox has
// used its network there is nothing to wait for.
func (l *Lazy) Ready() error {
	l.mu.Lock()
	p, err := l.p, l.err
	l.mu.Unlock()
	if p == nil {
		return err
	}
	return p.Ready()
}

// Close stops the watch and the helper, if it started, and returns its
// report.
func (l *Lazy) Close() (Report, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return Report{}, errors.New("closed twice")
	}
	l.closed = true
	dev := l.dev
	l.dev = nil
	l.mu.Unlock()
	if dev != nil {
		dev.Close() // ends the watch
	}
	<-l.watched
	l.mu.Lock()
	p, err := l.p, l.err
	l.mu.Unlock()
	if p == nil {
		return Report{}, err
	}
	return p.Close()
}
