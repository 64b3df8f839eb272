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
