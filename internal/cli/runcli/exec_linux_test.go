package runcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// These tests run the agentkernel binary's exec and cp against a real
// agent server (package agent's, on a real socket in a sandbox's
// directory) over a sandbox of their own: its root is a host directory,
// and its "commands" write their argv to their stdout and exit with the
// status their name asks for. The native sandbox behind the same socket
// is the end-to-end tests' (test/e2e).

type fakeSandbox struct {
	root       int
	mu         sync.Mutex
	ran        [][]string
	statsAsked int
	// noDisk: Stats reports no writable layer, as the native backend's
	// agent does not measure it.
	noDisk bool
}

func (f *fakeSandbox) Exec(req *agent.ExecRequest, stdio [3]int) (agent.Process, error) {
	f.mu.Lock()
	f.ran = append(f.ran, req.Args)
	f.mu.Unlock()
	if req.Args[0] == "missing" {
		return nil, &agent.ExecError{Kind: agent.KindExec, Errno: unix.ENOENT, Msg: "exec missing: no such file or directory"}
	}
	_, _ = unix.Write(stdio[1], []byte(strings.Join(req.Args, " ")+"\n"))
	code := 0
	if req.Args[0] == "exit3" {
		code = 3
	}
	return exited(code), nil
}

func (f *fakeSandbox) FS() *agent.FS {
	return &agent.FS{Root: f.root, InSandbox: true, UID: -1, GID: -1}
}

// Stats reports 0.25 s more CPU time at each call, so that a sample
// between two calls is 50% of a 0.5 s sample.
func (f *fakeSandbox) Stats() agent.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statsAsked++
	st := agent.Stats{Pids: 1, MemoryBytes: 3 << 20, UpperBytes: 2048, CPUSeconds: 0.25 * float64(f.statsAsked), InitRSS: 1 << 20}
	if f.noDisk {
		st.UpperBytes = 0
	}
	return st
}

func (f *fakeSandbox) Stop() {}

func (f *fakeSandbox) statsCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statsAsked
}

func (f *fakeSandbox) commands() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.ran...)
}

type exited int

func (p exited) Pid() int                         { return 2 }
func (p exited) Signal(syscall.Signal) error      { return nil }
func (p exited) SignalGroup(syscall.Signal) error { return nil }
func (p exited) Wait() syscall.WaitStatus         { return syscall.WaitStatus(int(p) << 8) }

// serveSandbox makes <dataDir>/sandboxes/<name> with spec (none when
// nil) and, unless stopped, an agent server on its sock.
func serveSandbox(t *testing.T, dataDir, name string, spec []byte, stopped bool) (*fakeSandbox, string) {
	t.Helper()
	dir := filepath.Join(dataDir, "sandboxes", name)
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if spec != nil {
		if err := os.WriteFile(filepath.Join(dir, "spec.json"), spec, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(rfd) })
	sb := &fakeSandbox{root: rfd}
	if stopped {
		return sb, root
	}
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: filepath.Join(dir, "sock")}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 8); err != nil {
		t.Fatal(err)
	}
	srv := agent.NewServer(sb)
	go srv.Serve(lfd)
	t.Cleanup(func() { unix.Shutdown(lfd, unix.SHUT_RDWR); unix.Close(lfd); srv.Close() })
	return sb, root
}

func specJSON(t *testing.T, rules *sandbox.CommandRules) []byte {
	t.Helper()
	b, err := json.Marshal(&sandbox.Spec{ID: "abc", Commands: rules})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func leanApp() (*App, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &App{Stdout: &out, Stderr: &errb, HoldWarnings: true}, &out, &errb
}

func auditEntries(t *testing.T, dataDir string) []audit.Entry {
	t.Helper()
	es, err := audit.New(dataDir).Read(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestLeanExec: exec served over the sandbox's directory alone runs the
// command with its flags, gives its exit status, checks the sandbox's
// command rules (failing closed) and writes the audit entry the full
// binary writes.
func TestLeanExec(t *testing.T) {
	dd := t.TempDir()
	sb, _ := serveSandbox(t, dd, "dev", specJSON(t, &sandbox.CommandRules{Block: []string{"curl"}}), false)
	activity := filepath.Join(dd, "sandboxes", "dev", "activity")
	old := time.Now().Add(-time.Hour)
	if err := os.WriteFile(activity, nil, 0o600); err != nil || os.Chtimes(activity, old, old) != nil {
		t.Fatal(err)
	}

	a, out, _ := leanApp()
	err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "exec", "-e", "A=1", "-w", "/tmp", "dev", "--", "exit3", "x"})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || errors.Is(err, ErrNeedsFull) {
		t.Fatalf("exec exit3: %v", err)
	}
	if out.String() != "exit3 x\n" {
		t.Errorf("stdout: %q", out.String())
	}
	es := auditEntries(t, dd)
	if len(es) != 1 || es[0].Sandbox != "dev" || es[0].Action != audit.ActionExec || es[0].ExitCode == nil || *es[0].ExitCode != 3 ||
		strings.Join(es[0].Command, " ") != "exit3 x" || !strings.HasSuffix(es[0].Who, " via cli") {
		t.Fatalf("audit: %+v", es)
	}
	if fi, err := os.Stat(activity); err != nil || !fi.ModTime().After(old.Add(time.Minute)) {
		t.Errorf("the exec's time is not recorded: %v", err)
	}

	// The rules the sandbox was created with refuse curl: not started,
	// 126, audited.
	a, _, _ = leanApp()
	err = a.ExecuteSandboxCommand([]string{"exec", "--data-dir", dd, "dev", "curl", "http://x"})
	if !errors.As(err, &ee) || ee.Code != ExitCannotRun || !errors.Is(err, sandbox.ErrCommandRefused) {
		t.Fatalf("blocked command: %v", err)
	}
	for _, c := range sb.commands() {
		if c[0] == "curl" {
			t.Fatal("a blocked command was started")
		}
	}
	if es := auditEntries(t, dd); len(es) != 2 || es[1].Error == "" {
		t.Fatalf("the refusal is not audited: %+v", es)
	}

	// A command that cannot be found: 127, as the full binary says it.
	a, _, _ = leanApp()
	err = a.ExecuteSandboxCommand([]string{"--data-dir", dd, "exec", "dev", "missing"})
	if !errors.As(err, &ee) || ee.Code != ExitNotFound {
		t.Fatalf("missing command: %v", err)
	}
}

// TestLeanExecHandsOff: what the sandbox's directory cannot answer goes
// to agentkernel-full (ErrNeedsFull) before anything runs or is
// audited: an unknown or stopped sandbox, a spec that is missing or
// cannot be read (the rules fail closed, in the full binary's words), a
// name that is a path, help, a command line the parser refuses, other
// commands.
func TestLeanExecHandsOff(t *testing.T) {
	dd := t.TempDir()
	good := specJSON(t, nil)
	serveSandbox(t, dd, "stopped", good, true)
	nospec, _ := serveSandbox(t, dd, "nospec", nil, false)
	badspec, _ := serveSandbox(t, dd, "badspec", []byte(`{"commands": 5}`), false)
	// A sandbox outside the sandboxes directory, which a name like
	// ../x would reach.
	outside, _ := serveSandbox(t, dd, "../escape", good, false)
	// A running sandbox this binary could serve, but for a recording,
	// which is agentkernel-full's.
	up, _ := serveSandbox(t, dd, "up", good, false)
	for _, argv := range [][]string{
		{"--data-dir", dd, "exec", "nosuch", "--", "true"},
		{"--data-dir", dd, "exec", "stopped", "--", "true"},
		{"--data-dir", dd, "exec", "nospec", "--", "true"},
		{"--data-dir", dd, "exec", "badspec", "--", "true"},
		{"--data-dir", dd, "exec", "../escape", "--", "true"},
		{"--data-dir", dd, "attach", "../escape"},
		{"--data-dir", dd, "attach", "--record", "up"},
		{"--data-dir", dd, "attach", "up", "--record", "x.cast"},
		{"--data-dir", dd, "cp", "/etc/hostname", "nosuch:/x"},
		{"--data-dir", dd, "exec", "--help"},
		{"--data-dir", dd, "exec", "--bogus", "nospec", "true"},
		{"--data-dir", dd, "exec", "nospec"},
		{"--data-dir", dd, "--log-level", "loud", "exec", "nospec", "true"},
		{"--data-dir", dd, "sandbox", "list"},
		{"--data-dir", dd, "--", "exec", "nospec", "true"},
		{},
	} {
		a, out, errb := leanApp()
		err := a.ExecuteSandboxCommand(argv)
		if !errors.Is(err, ErrNeedsFull) {
			t.Errorf("%q: %v, want ErrNeedsFull", argv, err)
		}
		if out.Len() > 0 || errb.Len() > 0 {
			t.Errorf("%q printed %q %q before handing off", argv, out.String(), errb.String())
		}
	}
	for _, sb := range []*fakeSandbox{nospec, badspec, outside, up} {
		if c := sb.commands(); len(c) > 0 {
			t.Errorf("a command ran although the command line was handed off: %q", c)
		}
	}
	if es := auditEntries(t, dd); len(es) != 0 {
		t.Errorf("audited before handing off: %+v", es)
	}
}

// TestLeanCp: cp in and out of a running sandbox over its directory
// alone; the copy lands in the sandbox's root, and comes back.
func TestLeanCp(t *testing.T) {
	dd, host := t.TempDir(), t.TempDir()
	_, root := serveSandbox(t, dd, "dev", nil, false)
	src := filepath.Join(host, "in.txt")
	if err := os.WriteFile(src, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _, _ := leanApp()
	if err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "cp", src, "dev:/"}); err != nil {
		t.Fatalf("cp in: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "in.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("in the sandbox: %q %v", b, err)
	}
	back := filepath.Join(host, "back.txt")
	a, _, _ = leanApp()
	if err := a.ExecuteSandboxCommand([]string{"cp", "--data-dir", dd, "dev:/in.txt", back}); err != nil {
		t.Fatalf("cp out: %v", err)
	}
	if b, err := os.ReadFile(back); err != nil || string(b) != "hello" {
		t.Fatalf("copied out: %q %v", b, err)
	}
	a, _, _ = leanApp()
	err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "cp", "dev:/nope", back})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(err.Error(), "no such file or directory in the sandbox") {
		t.Fatalf("cp of a missing file: %v", err)
	}
}

// TestLeanAttach: attach runs the shell it is given, else /bin/sh when
// the sandbox has no /bin/bash, on a terminal of its own.
func TestLeanAttach(t *testing.T) {
	dd := t.TempDir()
	sb, root := serveSandbox(t, dd, "dev", specJSON(t, nil), false)
	a, out, _ := leanApp()
	a.Stdin = strings.NewReader("")
	err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "attach", "dev", "--shell", "exit3"})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || !strings.Contains(out.String(), "exit3") {
		t.Fatalf("attach --shell exit3: %v, output %q", err, out.String())
	}
	a, _, _ = leanApp()
	a.Stdin = strings.NewReader("")
	if err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "attach", "dev"}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil || os.WriteFile(filepath.Join(root, "bin", "bash"), nil, 0o755) != nil {
		t.Fatal(err)
	}
	a, _, _ = leanApp()
	a.Stdin = strings.NewReader("")
	if err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "attach", "dev"}); err != nil {
		t.Fatal(err)
	}
	c := sb.commands()
	if len(c) != 3 || c[1][0] != "/bin/sh" || c[2][0] != "/bin/bash" {
		t.Fatalf("shells run: %q", c)
	}
}
