package prestart

import (
	"syscall"
	"testing"
)

func TestIsRun(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"agentkernel", "run", "--", "true"}, true},
		{[]string{"agentkernel", "--data-dir", "/x", "run", "true"}, true},
		{[]string{"agentkernel", "-q", "-c", "run", "run"}, true},
		{[]string{"agentkernel", "--data-dir=/x", "--quiet", "run"}, true},
		{[]string{"agentkernel", "-c", "run"}, false},
		{[]string{"agentkernel", "exec", "run"}, false},
		{[]string{"agentkernel", "sandbox", "run"}, false},
		{[]string{"agentkernel", "--", "run"}, false},
		{[]string{"agentkernel"}, false},
		{[]string{"agentkernel:init"}, false},
		{nil, false},
	} {
		if got := IsRun(c.args); got != c.want {
			t.Errorf("IsRun(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestParseRun(t *testing.T) {
	for _, c := range []struct {
		args     []string
		dataDir  string
		noDaemon bool
	}{
		{[]string{"ak", "run", "true"}, "", false},
		{[]string{"ak", "--data-dir", "/d", "run", "--", "true"}, "/d", false},
		{[]string{"ak", "--data-dir=/d", "run", "true"}, "/d", false},
		{[]string{"ak", "run", "--data-dir", "/e", "-i", "alpine", "true"}, "/e", false},
		{[]string{"ak", "run", "-ialpine", "-e", "A=1", "-v", "/x:/y", "true"}, "", false},
		{[]string{"ak", "run", "--image", "x", "--no-daemon", "true"}, "", true},
		{[]string{"ak", "run", "--dry-run", "true"}, "", true},
		{[]string{"ak", "run", "-t", "sh"}, "", true},
		{[]string{"ak", "run", "-qt", "sh"}, "", true},
		{[]string{"ak", "run", "-tiALPINE", "sh"}, "", true},
		{[]string{"ak", "run", "--tty=false", "sh"}, "", false},
		{[]string{"ak", "run", "--interactive", "sh"}, "", true},
		{[]string{"ak", "run", "-k", "sh"}, "", true},
		{[]string{"ak", "run", "-B", "gvisor", "sh"}, "", true},
		{[]string{"ak", "run", "--backend=Native", "sh"}, "", false},
		{[]string{"ak", "run", "--fast=false", "sh"}, "", true},
		{[]string{"ak", "run", "-F=false", "sh"}, "", true},
		{[]string{"ak", "run", "-F", "sh"}, "", false},
		{[]string{"ak", "run", "--fast", "sh"}, "", false},
		{[]string{"ak", "run", "-t=false", "sh"}, "", false},
		{[]string{"ak", "run", "-S", "K:api.example.com", "sh"}, "", true},
		{[]string{"ak", "run", "--secret=K=v:api.example.com", "sh"}, "", true},
		{[]string{"ak", "run", "-qt=false", "sh"}, "", false},
		// The command's own flags are not run's.
		{[]string{"ak", "run", "sh", "-t", "--data-dir", "/x"}, "", false},
		{[]string{"ak", "run", "--", "sh", "--no-daemon"}, "", false},
		// A flag's value is not a flag.
		{[]string{"ak", "run", "-e", "--no-daemon", "true"}, "", false},
		{[]string{"ak", "run", "--data-dir"}, "", false},
	} {
		r, ok := parseRun(c.args)
		if !ok || r.dataDir != c.dataDir || r.noDaemon != c.noDaemon {
			t.Errorf("parseRun(%q) = %+v, %v; want data dir %q, noDaemon %v", c.args, r, ok, c.dataDir, c.noDaemon)
		}
	}
}

func TestDaemonServes(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AGENTKERNEL_NO_DAEMON", "")
	args := []string{"ak", "--data-dir", dir, "run", "true"}
	if daemonServes(args) {
		t.Fatal("no daemon socket, but the daemon would serve")
	}
	if err := syscall.Mkdir(dir+"/daemon", 0o700); err != nil {
		t.Fatal(err)
	}
	// A file is not a socket.
	fd, err := syscall.Open(dir+"/daemon/run.sock", syscall.O_CREAT|syscall.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	if daemonServes(args) {
		t.Fatal("a plain file taken for the daemon's socket")
	}
	syscall.Unlink(dir + "/daemon/run.sock")
	s, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(s)
	if err := syscall.Bind(s, &syscall.SockaddrUnix{Name: dir + "/daemon/run.sock"}); err != nil {
		t.Fatal(err)
	}
	if !daemonServes(args) {
		t.Fatal("a daemon socket, but no daemon would serve")
	}
	if daemonServes([]string{"ak", "--data-dir", dir, "run", "--no-daemon", "true"}) {
		t.Fatal("--no-daemon")
	}
	t.Setenv("AGENTKERNEL_NO_DAEMON", "1")
	if daemonServes(args) {
		t.Fatal("AGENTKERNEL_NO_DAEMON=1")
	}
	t.Setenv("AGENTKERNEL_NO_DAEMON", "0")
	if !daemonServes(args) {
		t.Fatal("AGENTKERNEL_NO_DAEMON=0 keeps the daemon")
	}
	t.Setenv("XDG_DATA_HOME", dir+"/xdg")
	if got := DefaultDataDir(); got != dir+"/xdg/agentkernel" {
		t.Errorf("DefaultDataDir with XDG_DATA_HOME = %q", got)
	}
	t.Setenv("XDG_DATA_HOME", "relative")
	t.Setenv("HOME", "/home/u")
	if got := DefaultDataDir(); got != "/home/u/.local/share/agentkernel" {
		t.Errorf("DefaultDataDir with HOME = %q", got)
	}
	t.Setenv("HOME", "")
	t.Setenv("TMPDIR", "")
	if got := DefaultDataDir(); got != "/tmp/agentkernel-"+itoa(syscall.Getuid()) {
		t.Errorf("DefaultDataDir without HOME = %q", got)
	}
}

func TestOtherBackend(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"ak", "run", "-B", "gvisor", "sh"}, true},
		{[]string{"ak", "run", "--backend=gvisor", "sh"}, true},
		{[]string{"ak", "run", "--backend=Native", "sh"}, false},
		{[]string{"ak", "run", "sh", "-B", "gvisor"}, false},
		{[]string{"ak", "images", "-B", "gvisor"}, false},
	} {
		if got := otherBackend(c.args); got != c.want {
			t.Errorf("otherBackend(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
