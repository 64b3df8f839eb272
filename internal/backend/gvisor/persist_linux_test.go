package gvisor

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// execOut runs args in the instance and returns its stdout and wait
// status.
func execOut(t *testing.T, in *Instance, req *agent.ExecRequest) (string, syscall.WaitStatus, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	p, err := in.Exec(req, [3]int{int(null.Fd()), int(w.Fd()), int(w.Fd())})
	w.Close()
	if err != nil {
		return "", 0, err
	}
	b, _ := io.ReadAll(r)
	return string(b), p.Wait(), nil
}

// TestPersistent: a persistent gvisor sandbox boots, runs commands
// beside its idle init (output, exit statuses, a missing command as
// ErrNotFound's errno, the spec's user), shares its root with the host
// side (a file written inside is read through FS's root, one written
// there is seen inside at once), reports stats, stops, and boots again
// with its writable layer kept.
func TestPersistent(t *testing.T) {
	needRunsc(t)
	if idleInit() == nil {
		t.Skip("persistent gvisor sandboxes exist on amd64 only")
	}
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, "sandboxes", "box")
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer)
	spec.ID = "persist-test"
	spec.Resources = sandbox.Resources{MemoryMB: 256, PIDs: 64}
	// A copy-on-write volume: its writes kept with the sandbox, never
	// in the host's directory.
	proj := t.TempDir()
	if err := os.WriteFile(filepath.Join(proj, "orig.txt"), []byte("orig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountCopyOnWrite, Source: proj, Dest: "/workspace"}}
	logPath := filepath.Join(t.TempDir(), "log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := b.Boot(ctx, spec, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	defer func() { in.Kill(); in.Close() }()
	// Its writable layers outlive the boot: synced as usual, never
	// volatile as a run's are.
	if ovs := overlaysOf(dataDir); len(ovs) == 0 {
		t.Error("no overlay of the sandbox's layers found")
	} else {
		for upper, volatile := range ovs {
			if volatile {
				t.Errorf("the persistent overlay of %s is volatile", upper)
			}
		}
	}

	out, ws, err := execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "echo hello; cat /proc/1/cmdline; echo; hostname"}})
	if err != nil || ws.ExitStatus() != 0 || out != "hello\n"+idlePath+"\x00\ngvisor-test\n" {
		t.Fatalf("exec: %q %v %v", out, ws, err)
	}
	if _, ws, err = execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "exit 3"}}); err != nil || ws.ExitStatus() != 3 {
		t.Fatalf("exit 3: %v %v", ws, err)
	}
	if _, ws, err = execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "kill -9 $$"}}); err != nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("kill -9: %v %v", ws, err)
	}
	_, _, err = execOut(t, in, &agent.ExecRequest{Args: []string{"no-such-command"}})
	var ee *agent.ExecError
	if !errors.As(err, &ee) || ee.Errno != unix.ENOENT {
		t.Fatalf("a missing command: %v", err)
	}
	if out, _, err = execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "id -u; id -g; pwd"}, User: "1234:2345", Workdir: "/tmp"}); err != nil || out != "1234\n2345\n/tmp\n" {
		t.Fatalf("user and workdir: %q %v", out, err)
	}

	// A terminal (exec -t): the command's stdio is a terminal (its
	// output through the terminal's line discipline), bridged to the
	// caller's pipes.
	out, ws, err = execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "test -t 0 && test -t 1 && echo isatty; echo $TERM"}, TTY: true})
	if err != nil || ws.ExitStatus() != 0 || out != "isatty\r\nxterm\r\n" {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("exec -t: %q %v %v\n%s", out, ws, err, b)
	}

	if out, _, err = execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "cat /workspace/orig.txt; echo cow > /workspace/new.txt"}}); err != nil || out != "orig\n" {
		t.Fatalf("the copy-on-write volume: %q %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(proj, "new.txt")); err == nil {
		t.Fatal("a write to the copy-on-write volume reached the host's directory")
	}

	// Inside → host side.
	if out, ws, err = execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "echo from inside > /tmp/in.txt"}}); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("write inside: %q %v %v", out, ws, err)
	}
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT}
	fd, err := unix.Openat2(in.FS().Root, "tmp/in.txt", &how)
	if err != nil {
		t.Fatalf("the host side does not see the sandbox's file: %v", err)
	}
	f := os.NewFile(uintptr(fd), "in.txt")
	b2, _ := io.ReadAll(f)
	f.Close()
	if string(b2) != "from inside\n" {
		t.Fatalf("host side read %q", b2)
	}
	// Host side → inside.
	how = unix.OpenHow{Flags: unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC, Mode: 0o644, Resolve: unix.RESOLVE_IN_ROOT}
	fd, err = unix.Openat2(in.FS().Root, "tmp/host.txt", &how)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(fd, []byte("from the host\n"))
	unix.Close(fd)
	if out, _, err = execOut(t, in, &agent.ExecRequest{Args: []string{"cat", "/tmp/host.txt"}}); err != nil || out != "from the host\n" {
		t.Fatalf("the sandbox does not see the host's file: %q %v", out, err)
	}

	// Stats: a long command is counted.
	p, err := in.Exec(&agent.ExecRequest{Args: []string{"sleep", "30"}}, [3]int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	st := in.Stats()
	if st.Pids < 2 || st.MemoryBytes <= 0 || st.UptimeSeconds <= 0 {
		t.Errorf("stats: %+v", st)
	}
	if p.Pid() <= 1 {
		t.Errorf("the command's pid in the sandbox: %d", p.Pid())
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := p.Wait(); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("SIGTERM: %v", ws)
	}

	in.Stop()
	select {
	case <-in.Done():
	default:
		t.Fatal("Stop returned before the sandbox ended")
	}
	if r := in.ExitReason(); r != "" {
		t.Errorf("a stopped sandbox's exit reason: %q", r)
	}
	in.Close()
	if _, err := os.Stat(filepath.Join(dir, "gvisor")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the boot's runtime directory stayed: %v", err)
	}

	// Booted again: the writable layer is kept.
	inst, err = b.Boot(ctx, spec, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	in = inst.(*Instance)
	if out, _, err = execOut(t, in, &agent.ExecRequest{Args: []string{"cat", "/tmp/in.txt", "/tmp/host.txt", "/workspace/new.txt"}}); err != nil || out != "from inside\nfrom the host\ncow\n" {
		t.Fatalf("after a second boot: %q %v", out, err)
	}
	in.Stop()
	in.Close()
	if left := leftovers(dataDir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestPersistentEndsWithBooter: a persistent sandbox ends when the
// process that booted it is killed (sandbox.Booter's contract): no runsc
// process of it is left. The booting process is this test binary
// re-executed.
func TestPersistentEndsWithBooter(t *testing.T) {
	if dir := os.Getenv("GVISOR_TEST_BOOT_DIR"); dir != "" {
		layer := busyboxLayer(t)
		spec := testSpec(layer)
		spec.ID = "orphan-test"
		if _, err := New(Options{}).Boot(context.Background(), spec, dir, os.Stderr); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("READY\n")
		time.Sleep(time.Minute)
		return
	}
	needRunsc(t)
	if idleInit() == nil {
		t.Skip("persistent gvisor sandboxes exist on amd64 only")
	}
	dir := filepath.Join(t.TempDir(), "box")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPersistentEndsWithBooter$", "-test.v")
	cmd.Env = append(os.Environ(), "GVISOR_TEST_BOOT_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	got := ""
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(got, "READY") && time.Now().Before(deadline) {
		n, err := out.Read(buf)
		got += string(buf[:n])
		if err != nil {
			break
		}
	}
	if !strings.Contains(got, "READY") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the booting process did not boot: %s", got)
	}
	if n := runscOf(dir); n == 0 {
		t.Fatal("control: no runsc process of the sandbox while it runs")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var n int
	for i := 0; i < 50; i++ {
		if n = runscOf(dir); n == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n > 0 {
		t.Fatalf("%d runsc processes of the sandbox outlived the process that booted it", n)
	}
	// The next boot removes what the killed one left (its cgroup),
	// and its own stop leaves nothing.
	spec := testSpec(busyboxLayer(t))
	spec.ID = "orphan-test"
	inst, err := New(Options{}).Boot(context.Background(), spec, dir, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	inst.(*Instance).Stop()
	inst.Close()
	if cgs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupName("agentkernel-orphan-test")); len(cgs) > 0 {
		t.Errorf("cgroups left: %v", cgs)
	}
	if cgs, _ := filepath.Glob("/sys/fs/cgroup/*/agentkernel-orphan-test"); len(cgs) > 0 {
		t.Errorf("cgroups left: %v", cgs)
	}
}

// runscOf counts the processes whose command line names dir.
func runscOf(dir string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), dir) {
			n++
		}
	}
	return n
}
