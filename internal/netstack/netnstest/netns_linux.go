package netnstest

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// Netns is a new network namespace that exists as long as one locked OS
// thread of the test process stays in it. Do runs functions on that
// thread: sockets they create, and TUN devices they open, belong to the
// namespace.
type Netns struct {
	ch   chan func()
	done chan struct{}
	tid  int
}

// New makes a network namespace with loopback up, gone when the test
// ends. It needs root.
func New(t testing.TB) *Netns {
	t.Helper()
	testenv.RequireRoot(t)
	n := &Netns{ch: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		defer close(n.done)
		// The thread is never unlocked: when this goroutine returns, the
		// runtime ends the thread and, with it, the namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		n.tid = unix.Gettid()
		errc <- loUp()
		for f := range n.ch {
			f()
		}
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	return n
}

func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// Do runs f on the namespace's thread and waits for it.
func (n *Netns) Do(f func()) {
	done := make(chan struct{})
	n.ch <- func() { defer close(done); f() }
	<-done
}

// Path is the namespace's file, for nsenter --net=PATH.
func (n *Netns) Path() string {
	return fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), n.tid)
}

func (n *Netns) close() {
	close(n.ch)
	<-n.done
}

// NewTUN makes a namespace as New does with a sandbox's TUN device in
// it, eth0, configured as the network stage leaves it
// (tundev.DefaultLayout); the caller owns the device.
func NewTUN(t testing.TB) (*Netns, *os.File) {
	t.Helper()
	n := New(t)
	var f *os.File
	var err error
	n.Do(func() {
		if f, err = tundev.Open("eth0"); err == nil {
			err = tundev.Configure("eth0", tundev.DefaultLayout())
		}
		if err == nil {
			err = tundev.AwaitLocal(tundev.DefaultLayout())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, f
}
