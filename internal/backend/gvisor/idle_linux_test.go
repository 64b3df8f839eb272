package gvisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// TestIdleInit: the idle init runs (on the host kernel here), sleeps
// rather than spins, and reaps nothing it should not: it is alive a
// moment later, using next to no CPU, and dies of SIGKILL.
func TestIdleInit(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		if idleInit() != nil {
			t.Fatal("an idle init for an architecture it was not written for")
		}
		t.Skip("the idle init exists for amd64 only")
	}
	p := filepath.Join(t.TempDir(), "idle")
	if err := os.WriteFile(p, idleInit(), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("the idle init ended: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	b, err := os.ReadFile("/proc/" + itoa(cmd.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stat: %s", b)
	_ = cmd.Process.Kill()
	<-done
	if ws := cmd.ProcessState.String(); ws != "signal: killed" {
		t.Fatalf("the idle init ended as %q", ws)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
