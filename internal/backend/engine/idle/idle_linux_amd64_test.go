package idle

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestBinaryIsTheAssembledProgram: the constant is idle_amd64.bin byte
// for byte (go generate rewrites both).
func TestBinaryIsTheAssembledProgram(t *testing.T) {
	b, err := os.ReadFile("idle_amd64.bin")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != Binary {
		t.Fatal("idle_bin_linux_amd64.go is stale: go generate ./internal/backend/engine/idle")
	}
}

func write(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idle")
	if err := os.WriteFile(p, []byte(Binary), 0o555); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRefusesOutsidePID1: anywhere but as a PID namespace's first
// process it exits 2 at once (its kill(-1) would reach every process
// of its user).
func TestRefusesOutsidePID1(t *testing.T) {
	err := exec.Command(write(t)).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("err %v, want exit status 2", err)
	}
}

// TestIdlesAsPID1: as PID 1 of its own PID namespace it ignores SIGTERM,
// passes it on to the namespace's other processes, reaps orphans, and
// ends with SIGKILL.
func TestIdlesAsPID1(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "a PID namespace: run as root")
	}
	cmd := exec.Command(write(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	pid := cmd.Process.Pid
	// A child in its namespace whose parent exits at once: an orphan
	// that PID 1 must reap, and a process that SIGTERM must reach.
	// sh starts in the namespace from a parent outside it, as a
	// container's exec does; its background sleep lands under PID 1.
	sleeper := exec.Command("nsenter", "-t", itoa(pid), "-p", "--", "sh", "-c", "sleep 100 >/dev/null 2>&1 & echo $!")
	out, err := sleeper.Output()
	if err != nil {
		testenv.Missing(t, "nsenter: %v", err)
	}
	child := strings.TrimSpace(string(out))
	// Find it from the host: the one process whose parent is pid.
	var host int
	for i := 0; i < 100 && host == 0; i++ {
		host = childOf(pid)
		time.Sleep(20 * time.Millisecond)
	}
	if host == 0 {
		t.Fatalf("no orphan under the idler (child %s in the namespace)", child)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The orphan gets the SIGTERM, dies, and is reaped: gone from /proc.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + itoa(host)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile("/proc/" + itoa(host) + "/status")
			t.Fatalf("the orphan %d is still there:\n%s", host, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the idler ended on SIGTERM: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	_ = cmd.Process.Kill()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("wait: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// childOf is a process whose parent is pid, 0 if none.
func childOf(pid int) int {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/task/" + itoa(pid) + "/children")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}
