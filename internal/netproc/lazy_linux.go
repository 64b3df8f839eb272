package netproc

import (
	"errors"
	"os"
	"sync"

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
	dev    *os.File

	cancelR, cancelW *os.File
	watched          chan struct{}

	mu     sync.Mutex
	p      *Proc
	err    error
	closed bool
}

// StartLazy watches dev and starts the helper (Start) the first time it
// has something to read. It takes dev over.
func StartLazy(exe string, dev *os.File, cfg Config, onDeny func(Denial)) (*Lazy, error) {
	r, w, err := os.Pipe()
	if err != nil {
		dev.Close()
		return nil, err
	}
	l := &Lazy{exe: exe, cfg: cfg, onDeny: onDeny, dev: dev, cancelR: r, cancelW: w, watched: make(chan struct{})}
	go l.watch()
	return l, nil
}

func (l *Lazy) watch() {
	defer close(l.watched)
	fds := []unix.PollFd{{Fd: int32(l.dev.Fd()), Events: unix.POLLIN}, {Fd: int32(l.cancelR.Fd()), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || fds[1].Revents != 0 || fds[0].Revents&unix.POLLIN == 0 {
			return // cancelled, or the device is gone
		}
		break
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
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
	l.mu.Unlock()
	l.cancelW.Close()
	<-l.watched
	l.cancelR.Close()
	l.mu.Lock()
	p, err := l.p, l.err
	if l.dev != nil {
		l.dev.Close()
		l.dev = nil
	}
	l.mu.Unlock()
	if p == nil {
		return Report{}, err
	}
	return p.Close()
}
