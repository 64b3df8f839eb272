package gvisor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// bootTest boots a persistent sandbox of spec in dir (under dataDir),
// killed and closed at the test's end.
func bootTest(t *testing.T, b *Backend, spec *sandbox.Spec, dir string) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := b.Boot(ctx, spec, dir, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	t.Cleanup(func() { in.Kill(); in.Close() })
	return in
}

// detached starts args as detached command id in in, its stdout and
// stderr one pipe, whose read end it returns.
func startDetached(t *testing.T, in *Instance, id string, args ...string) (agent.Process, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	p, err := in.ExecDetached(id, &agent.ExecRequest{Args: args}, [3]int{int(null.Fd()), int(w.Fd()), int(w.Fd())})
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return p, r
}

// lastCount reads the numbers the counter writes to r until it has one
// greater than min, and returns the last read.
func lastCount(t *testing.T, r io.Reader, min int) int {
	t.Helper()
	buf := make([]byte, 4096)
	var acc []byte
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, err := r.Read(buf)
		acc = append(acc, buf[:n]...)
		if f := strings.Fields(string(acc)); len(f) > 0 && bytes.HasSuffix(acc, []byte("\n")) {
			if v, _ := strconv.Atoi(f[len(f)-1]); v > min {
				return v
			}
		}
		if err != nil {
			t.Fatalf("the counter's output: %v (%q)", err, acc)
		}
	}
	t.Fatalf("the counter did not pass %d: %q", min, acc)
	return 0
}

// TestDetachedContainers: a detached command is a container of the
// sandbox: its output on its stdio, its pid seen from an exec (the
// sandbox's PID namespace), a signal to it and to its group, its exit
// status; its bundle and container go once it has ended. Hostile ids
// are refused.
func TestDetachedContainers(t *testing.T) {
	needRunsc(t)
	if idleInit() == nil {
		t.Skip("persistent gvisor sandboxes exist on amd64 only")
	}
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer)
	spec.ID = "det-test"
	in := bootTest(t, b, spec, filepath.Join(dataDir, "sandboxes", "box"))

	for _, id := range []string{"../../x", "", "0123456789abcdeg", "0123456789abcdef/"} {
		if _, err := in.ExecDetached(id, &agent.ExecRequest{Args: []string{"true"}}, [3]int{0, 1, 2}); err == nil {
			t.Errorf("id %q: accepted", id)
		}
	}
	p, out := startDetached(t, in, "00000000000000a1", "sh", "-c", "echo hello $$; sleep 0.5; exit 7")
	b2, _ := io.ReadAll(out)
	if ws := p.Wait(); ws.ExitStatus() != 7 {
		t.Errorf("exit status: %v", ws)
	}
	if !strings.HasPrefix(string(b2), "hello ") {
		t.Errorf("output: %q", b2)
	}
	if pid := strings.TrimSpace(strings.TrimPrefix(string(b2), "hello ")); pid != strconv.Itoa(p.Pid()) {
		t.Errorf("the command's own pid %q, Pid %d", pid, p.Pid())
	}
	if _, err := os.Stat(filepath.Join(in.r.dir, "d-00000000000000a1")); err == nil {
		t.Errorf("the bundle of an ended command stayed")
	}

	// Confined as an exec is: the sandbox's root (a file written in /tmp
	// lands in its writable layer, not the host's), its PID namespace
	// (PID 1 the idle init), the user asked for.
	marker := "made-by-detached-" + filepath.Base(t.TempDir())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err = in.ExecDetached("00000000000000a3", &agent.ExecRequest{Args: []string{"sh", "-c", "cat /proc/1/cmdline; echo; id -u; id -g"}, User: "1234:2345"}, [3]int{int(r.Fd()), int(w.Fd()), int(w.Fd())})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	b3, _ := io.ReadAll(r)
	r.Close()
	p.Wait()
	if string(b3) != idlePath+"\x00\n1234\n2345\n" {
		t.Errorf("a detached command's view: %q", b3)
	}
	p, _ = startDetached(t, in, "00000000000000a4", "sh", "-c", "echo x > /tmp/"+marker)
	p.Wait()
	if _, err := os.Stat("/tmp/" + marker); err == nil {
		os.Remove("/tmp/" + marker)
		t.Errorf("a detached command wrote to the host's /tmp")
	}
	if _, err := os.Stat(filepath.Join(in.r.keep, "upper", "tmp", marker)); err != nil {
		t.Errorf("a detached command's file is not in the sandbox's writable layer: %v", err)
	}

	p, _ = startDetached(t, in, "00000000000000a2", "sh", "-c", "sleep 4711 & sleep 4712")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps, _, err := execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(ps, "sleep 4711") && strings.Contains(ps, "sleep 4712") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an exec does not see the detached command's processes: %q", ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.SignalGroup(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ws := p.Wait(); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("killed: %v", ws)
	}
	ps, _, _ := execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"}})
	if strings.Contains(ps, "sleep 471") {
		t.Errorf("the group's processes outlived the kill: %q", ps)
	}
	if err := p.Signal(syscall.SIGTERM); err == nil {
		t.Errorf("a signal to an ended command: no error")
	}
}

// TestCheckpointRefuses: a memory snapshot of a sandbox with secrets
// (bindings recorded, or values resolved) is refused as unsupported, as
// is a hostile sandbox id, before anything is written. (A network is
// not refused: TestGVisorMemorySnapshotNetwork.)
func TestCheckpointRefuses(t *testing.T) {
	b := New(Options{DataDir: t.TempDir()})
	for _, spec := range []*sandbox.Spec{
		{ID: "x", Network: sandbox.Network{Mode: sandbox.NetworkFiltered}, SecretBindings: &sandbox.SecretBindings{Bindings: []sandbox.SecretRef{{Key: "K", Host: "api.test"}}}},
		{ID: "x", Network: sandbox.Network{Mode: sandbox.NetworkFiltered}, Secrets: &sandbox.Secrets{}},
		{ID: "../x", Network: sandbox.Network{Mode: sandbox.NetworkNone}},
		{ID: "", Network: sandbox.Network{Mode: sandbox.NetworkNone}},
	} {
		to := filepath.Join(t.TempDir(), "mem")
		_, err := b.Checkpoint(spec, t.TempDir(), to)
		if err == nil {
			t.Errorf("%+v: taken", spec)
		}
		if spec.ID == "x" && !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("%+v: %v, not ErrUnsupported", spec, err)
		}
		if _, err := os.Stat(to); err == nil {
			t.Errorf("%+v: wrote %s", spec, to)
		}
	}
}
