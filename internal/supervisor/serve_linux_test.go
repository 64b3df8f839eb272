package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// These tests run the supervisor over a backend of their own: a sandbox
// whose "root" is a host directory and whose commands are stand-ins
// judged by their name. The supervisor knows a backend only through the
// interfaces of package sandbox, so any backend that implements them is
// served the same way; the native backend's sandboxes are exercised by
// the end-to-end tests (test/e2e, sandbox_test.go).

// dirInstance is a booted sandbox: an agent.Sandbox over a directory.
type dirInstance struct {
	root   int
	done   chan struct{}
	once   sync.Once
	reason string

	mu     sync.Mutex
	killed bool
	closed bool
}

func (d *dirInstance) end(reason string) {
	d.once.Do(func() { d.reason = reason; close(d.done) })
}

func (d *dirInstance) Done() <-chan struct{} { return d.done }
func (d *dirInstance) ExitReason() string    { <-d.done; return d.reason }
func (d *dirInstance) Kill() {
	d.mu.Lock()
	d.killed = true
	d.mu.Unlock()
	d.end("killed")
}
func (d *dirInstance) Close() {
	<-d.done
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	unix.Close(d.root)
}

// Exec fails as a backend would for the commands named after a failure,
// and "exit3" ends with status 3.
func (d *dirInstance) Exec(req *agent.ExecRequest, _ [3]int) (agent.Process, error) {
	switch req.Args[0] {
	case "missing":
		return nil, &agent.ExecError{Kind: agent.KindExec, Errno: unix.ENOENT, Msg: "exec missing: executable file not found in $PATH"}
	case "noexec":
		return nil, &agent.ExecError{Kind: agent.KindExec, Errno: unix.EACCES, Msg: "exec noexec: permission denied"}
	case "setup":
		return nil, &agent.ExecError{Kind: agent.KindSetup, Errno: unix.ENOENT, Msg: "joining the cgroup: no such file or directory"}
	}
	return exitedProc(3), nil
}

func (d *dirInstance) FS() *agent.FS {
	return &agent.FS{Root: d.root, InSandbox: true, UID: -1, GID: -1}
}
func (d *dirInstance) Stats() agent.Stats { return agent.Stats{Pids: 1, UptimeSeconds: 1} }
func (d *dirInstance) Stop()              { d.end("") }

// exitedProc is a command that ended with the given status.
type exitedProc int

func (p exitedProc) Pid() int                         { return 2 }
func (p exitedProc) Signal(syscall.Signal) error      { return nil }
func (p exitedProc) SignalGroup(syscall.Signal) error { return nil }
func (p exitedProc) Wait() syscall.WaitStatus         { return syscall.WaitStatus(int(p) << 8) }

func (d *dirInstance) isKilledClosed() (killed, closed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.killed, d.closed
}

// dirBackend boots dirInstances (or, with plain, an Instance that is no
// agent.Sandbox).
type dirBackend struct {
	root   string
	plain  bool
	booted *dirInstance
}

func (b *dirBackend) Boot(_ context.Context, _ *sandbox.Spec, _ string, _ *os.File) (sandbox.Instance, error) {
	fd, err := unix.Open(b.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	b.booted = &dirInstance{root: fd, done: make(chan struct{})}
	if b.plain {
		return plainInstance{d: b.booted}, nil
	}
	return b.booted, nil
}

// plainInstance is a sandbox.Instance and nothing more.
type plainInstance struct{ d *dirInstance }

func (p plainInstance) Done() <-chan struct{} { return p.d.Done() }
func (p plainInstance) ExitReason() string    { return p.d.ExitReason() }
func (p plainInstance) Kill()                 { p.d.Kill() }
func (p plainInstance) Close()                { p.d.Close() }

// serve runs Serve for b in dir and returns what it said on its ready
// pipe and a channel with its result.
func serve(t *testing.T, b sandbox.Booter, spec *sandbox.Spec, dir string) (string, <-chan error) {
	t.Helper()
	rr, rw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	res := make(chan error, 1)
	// Serve locks its thread for good: a goroutine of its own.
	go func() { res <- Serve(context.Background(), b, spec, dir, rw) }()
	msg, _ := io.ReadAll(rr)
	return string(msg), res
}

type fixedMeter map[string]sandbox.Usage

func (m fixedMeter) Measure(id string) (sandbox.Usage, bool) { u, ok := m[id]; return u, ok }

// TestServeOverSandboxInterfaces: Serve boots through a sandbox.Booter,
// serves the agent protocol over the Instance on dir/sock, and the
// client side maps a failed exec by its kind and error number; files
// reach the instance's root; a stop ends Serve with no exit-reason and
// no socket left, the instance closed.
func TestServeOverSandboxInterfaces(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	spec := &sandbox.Spec{ID: "abc123"}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "spec.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	be := &dirBackend{root: root}
	msg, res := serve(t, be, spec, dir)
	if msg != "ok" {
		t.Fatalf("ready: %q, Serve: %v", msg, <-res)
	}
	c, err := agent.Dial(filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn := agent.SandboxConn{C: c, Dir: dir, Meter: fixedMeter{"abc123": {MemoryBytes: 4096, CPUSeconds: 1.5, Pids: 3}}}
	ctx := context.Background()

	for _, tc := range []struct {
		cmd  string
		is   error
		not  error
		tail string
	}{
		{"missing", sandbox.ErrNotFound, sandbox.ErrCannotInvoke, ": command not found"},
		{"noexec", sandbox.ErrCannotInvoke, sandbox.ErrNotFound, ": command cannot be invoked"},
	} {
		_, err := conn.Exec(ctx, sandbox.ExecRequest{Args: []string{tc.cmd}}, sandbox.Stdio{}, nil)
		if !errors.Is(err, tc.is) || errors.Is(err, tc.not) || !strings.HasSuffix(err.Error(), tc.tail) {
			t.Errorf("exec %s: %v", tc.cmd, err)
		}
	}
	// A setup failure is the sandbox's (125 at the face), whatever its
	// error number.
	if _, err := conn.Exec(ctx, sandbox.ExecRequest{Args: []string{"setup"}}, sandbox.Stdio{}, nil); err == nil ||
		errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrCannotInvoke) || !errors.Is(err, unix.ENOENT) {
		t.Errorf("exec with a setup failure: %v", err)
	}
	if r, err := conn.Exec(ctx, sandbox.ExecRequest{Args: []string{"exit3"}}, sandbox.Stdio{}, nil); err != nil || r.ExitCode != 3 {
		t.Errorf("exec exit3: %+v %v", r, err)
	}

	if _, err := conn.WriteFile(ctx, "/work/hello.txt", strings.NewReader("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "work", "hello.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("the written file in the instance's root: %q %v", b, err)
	}
	var out bytes.Buffer
	if _, err := conn.ReadFile(ctx, "/work/hello.txt", &out); err != nil || out.String() != "hi" {
		t.Fatalf("read back: %q %v", out.String(), err)
	}

	u, err := conn.Usage(ctx)
	if err != nil || u.MemoryBytes != 4096 || u.CPUSeconds != 1.5 || u.Pids != 3 || u.UptimeSeconds != 1 || u.SupervisorRSS <= 0 {
		t.Fatalf("usage with the backend's meter: %+v %v", u, err)
	}
	if u, err := (agent.SandboxConn{C: c, Dir: dir}).Usage(ctx); err != nil || u.MemoryBytes != 0 || u.Pids != 1 {
		t.Fatalf("usage without a meter: %+v %v", u, err)
	}

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after a stop")
	}
	if _, err := os.Stat(filepath.Join(dir, "sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "exit-reason")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("exit-reason after a stop that was asked for: %v", err)
	}
	if _, closed := be.booted.isKilledClosed(); !closed {
		t.Error("the instance was not closed")
	}
}

// TestServeRecordsExitReason: a sandbox that ends on its own has why in
// exit-reason.
func TestServeRecordsExitReason(t *testing.T) {
	dir := t.TempDir()
	be := &dirBackend{root: t.TempDir()}
	msg, res := serve(t, be, &sandbox.Spec{}, dir)
	if msg != "ok" {
		t.Fatalf("ready: %q, Serve: %v", msg, <-res)
	}
	be.booted.end("sandbox init killed by signal 9")
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "exit-reason")); err != nil || string(b) != "sandbox init killed by signal 9" {
		t.Fatalf("exit-reason: %q %v", b, err)
	}
}

// TestServeUnservableInstance: an Instance the agent server cannot serve
// (no agent.Sandbox) is killed and closed, and the starter hears why
// (ErrUnsupported); no socket is left.
func TestServeUnservableInstance(t *testing.T) {
	dir := t.TempDir()
	be := &dirBackend{root: t.TempDir(), plain: true}
	msg, res := serve(t, be, &sandbox.Spec{}, dir)
	err := <-res
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.HasPrefix(msg, "error: ") || !strings.Contains(msg, "cannot be served") {
		t.Fatalf("ready %q, Serve: %v", msg, err)
	}
	if killed, closed := be.booted.isKilledClosed(); !killed || !closed {
		t.Errorf("instance killed %v, closed %v", killed, closed)
	}
	if _, err := os.Stat(filepath.Join(dir, "sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
}
