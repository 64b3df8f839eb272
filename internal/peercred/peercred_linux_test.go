package peercred

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// envConnect makes this test binary a client: it connects to the unix
// socket named, waits for the server to close, and exits.
const envConnect = "PEERCRED_TEST_CONNECT"

func TestMain(m *testing.M) {
	if path := os.Getenv(envConnect); path != "" {
		c, err := net.Dial("unix", path)
		if err != nil {
			os.Exit(3)
		}
		_, _ = c.Read(make([]byte, 1))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// peerOf accepts one connection on a fresh socket from a child of this
// test binary started with attr (nil: in our namespaces) and returns
// what Of says about it.
func peerOf(t *testing.T, attr *syscall.SysProcAttr) Peer {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envConnect+"="+sock)
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		testenv.Missing(t, "starting a client in new namespaces: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_ = ln.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatalf("the client did not connect: %v", err)
	}
	defer c.Close()
	p, err := Of(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != os.Geteuid() {
		t.Errorf("peer uid %d, want ours (%d)", p.UID, os.Geteuid())
	}
	if p.PID != cmd.Process.Pid {
		t.Errorf("peer pid %d, want the client's (%d)", p.PID, cmd.Process.Pid)
	}
	return p
}

// TestOf: a client of our uid is in our namespaces only when it really
// is; a child in a new user namespace mapping our uid, or in a new PID
// namespace, is not, although SO_PEERCRED gives our uid for both.
func TestOf(t *testing.T) {
	if p := peerOf(t, nil); !p.OwnNS || p.NSErr != nil {
		t.Errorf("a client in our namespaces: OwnNS %v (%v)", p.OwnNS, p.NSErr)
	}
	for name, flags := range testenv.OtherNamespaces {
		t.Run(name, func(t *testing.T) {
			p := peerOf(t, testenv.InNamespaces(t, flags))
			if p.OwnNS || !errors.Is(p.NSErr, ErrOtherNamespace) {
				t.Errorf("a client in a new %s namespace: OwnNS %v (%v)", name, p.OwnNS, p.NSErr)
			}
		})
	}
}

// TestPidfdAndProcAgree: the two ways of reading a process's namespaces
// (through its pidfd, and /proc/<pid>/ns, the fallback) give the same
// answer, for this process and for a child in new namespaces.
func TestPidfdAndProcAgree(t *testing.T) {
	own, err := ownNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	check := func(pid int, wantOwn bool) {
		t.Helper()
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			testenv.Missing(t, "pidfd_open: %v", err)
		}
		defer unix.Close(pidfd)
		viaPidfd, err := pidfdNamespaces(pidfd)
		if ioctlMissing(err) {
			testenv.Missing(t, "the kernel lacks PIDFD_GET_*_NAMESPACE (Linux 6.11): %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		viaProc, err := procNamespaces(pid)
		if err != nil {
			t.Fatal(err)
		}
		if viaPidfd != viaProc {
			t.Errorf("pid %d: through the pidfd %+v, through /proc %+v", pid, viaPidfd, viaProc)
		}
		if (viaPidfd == own) != wantOwn {
			t.Errorf("pid %d: namespaces %+v, ours %+v, want equal: %v", pid, viaPidfd, own, wantOwn)
		}
		if exited(pidfd) {
			t.Errorf("pid %d: a live process reads as exited", pid)
		}
	}
	check(os.Getpid(), true)
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = testenv.InNamespaces(t, syscall.CLONE_NEWUSER|syscall.CLONE_NEWPID)
	if err := cmd.Start(); err != nil {
		testenv.Missing(t, "starting a child in new namespaces: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	check(cmd.Process.Pid, false)

	// A pidfd whose process has exited says so: the /proc fallback's
	// proof that the pid was still the peer's.
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !exited(pidfd) {
		t.Errorf("an exited process reads as live")
	}
	if _, err := procNamespaces(0); err == nil {
		t.Errorf("pid 0 (no pid in our PID namespace) has namespaces")
	}
}

// BenchmarkOf is the cost Of adds to every connection of the run socket
// and the API's unix sockets.
func BenchmarkOf(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptUnix()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if p, err := Of(s); err != nil || !p.OwnNS {
			b.Fatalf("%+v %v", p, err)
		}
	}
}

// TestSelfUnknown: when this process's own namespaces could not be read,
// no peer counts as being in them, ourselves included.
func TestSelfUnknown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p, err := ReadSelf().Of(s); err != nil || !p.OwnNS {
		t.Fatalf("ourselves: %+v %v", p, err)
	}
	for _, self := range []Self{{}, {err: errors.New("no /proc")}} {
		if p, err := self.Of(s); err != nil || p.OwnNS || p.NSErr == nil || p.UID != os.Geteuid() {
			t.Errorf("Self %+v: %+v %v, want our uid, not our namespaces, and why", self, p, err)
		}
	}
}
