package native

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestDevptsPeerRefuses: what a sandbox could put at /dev/pts/ptmx
// instead of its devpts multiplexer (a file, a FIFO, another character
// device) is refused before any ioctl; a real multiplexer gives a slave.
func TestDevptsPeerRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ptmx")
	if err := os.WriteFile(file, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, fifo, "/dev/null", "/dev/zero"} {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if slave, err := devptsPeer(fd); err == nil {
			unix.Close(slave)
			t.Errorf("%s: taken as a devpts multiplexer", p)
		}
		unix.Close(fd)
	}
	fd, err := unix.Open("/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		testenv.Missing(t, "no devpts here: %v", err)
	}
	defer unix.Close(fd)
	slave, err := devptsPeer(fd)
	if err != nil {
		t.Fatalf("the host's devpts multiplexer: %v", err)
	}
	unix.Close(slave)
}

// TestRecvCommandPTYRefuses: the parent of a re-executed init takes the
// command's terminal from the config socket only as message 'T' with one
// devpts multiplexer; a file or another device in its place, a wrong
// message or a closed socket give no terminal (and the descriptor sent
// is closed).
func TestRecvCommandPTYRefuses(t *testing.T) {
	send := func(msg string, path string) *os.File {
		t.Helper()
		sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		parent := os.NewFile(uintptr(sp[0]), "parent")
		defer parent.Close()
		var rights []byte
		if path != "" {
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if err != nil {
				testenv.Missing(t, "%s: %v", path, err)
			}
			defer unix.Close(fd)
			rights = unix.UnixRights(fd)
		}
		if msg != "" || rights != nil {
			if err := unix.Sendmsg(sp[1], []byte(msg), rights, nil, 0); err != nil {
				t.Fatal(err)
			}
		}
		unix.Close(sp[1])
		return recvCommandPTY(parent)
	}
	file := filepath.Join(t.TempDir(), "ptmx")
	if err := os.WriteFile(file, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ msg, path string }{{"T", file}, {"T", "/dev/null"}, {"T", "/dev/zero"}, {"N", "/dev/pts/ptmx"}, {"T", ""}, {"", ""}} {
		if f := send(c.msg, c.path); f != nil {
			f.Close()
			t.Errorf("message %q with %q: taken as the command's terminal", c.msg, c.path)
		}
	}
	f := send("T", "/dev/pts/ptmx")
	if f == nil {
		t.Fatal("a devpts multiplexer: refused")
	}
	f.Close()
}
