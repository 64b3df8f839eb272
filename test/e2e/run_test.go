//go:build linux

package e2e

import (
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// testImage is the busybox userland plus a marker file, so a test can tell
// which image it is running in.
func testImage(t *testing.T, marker string) v1.Image {
	t.Helper()
	return imagetest.Image(t, imagetest.BusyboxConfig(),
		imagetest.Layer(t, imagetest.BusyboxFiles(t)...),
		imagetest.Layer(t, imagetest.Reg("etc/agentkernel-test", marker+"\n")))
}

var (
	regOnce sync.Once
	regRef  string
)

// withRegistry returns an agentkernel runner and the reference of the test
// image in a registry served in-process on 127.0.0.1.
func withRegistry(t *testing.T) (*ak, string) {
	t.Helper()
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "tools/busybox:1", testImage(t, "registry"))
	return newAK(t), ref
}

func TestRunPullsAndRunsImage(t *testing.T) {
	a, ref := withRegistry(t)
	r := a.run("run", "--image", ref, "--", "cat", "/etc/agentkernel-test")
	if r.code != 0 || r.stdout != "registry\n" {
		t.Fatalf("first run (pull): %v", r)
	}
	r = a.run("-q", "run", "--image", ref, "--pull", "never", "--", "echo", "cached")
	if r.code != 0 || r.stdout != "cached\n" || r.stderr != "" {
		t.Fatalf("second run must use the cache quietly: %v", r)
	}
	r = a.run("images", "list")
	if !strings.Contains(r.stdout, "tools/busybox") {
		t.Fatalf("images list: %v", r)
	}
}

func TestRunExitCodes(t *testing.T) {
	a, ref := withRegistry(t)
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"false"}, 1},
		{[]string{"sh", "-c", "exit 42"}, 42},
		{[]string{"no-such-command"}, 127},
		{[]string{"/etc/passwd"}, 126},
		{[]string{"sh", "-c", "kill -9 $$"}, 137},
	} {
		r := a.run(append([]string{"run", "--image", ref, "--"}, c.args...)...)
		if r.code != c.want {
			t.Errorf("%v: want exit %d, got %v", c.args, c.want, r)
		}
	}
}

func TestRunStdinEnvWorkdirUser(t *testing.T) {
	a, ref := withRegistry(t)
	a.stdin = "from stdin\n"
	r := a.run("run", "--image", ref, "--", "cat")
	if r.code != 0 || r.stdout != "from stdin\n" {
		t.Fatalf("stdin: %v", r)
	}
	a.stdin = ""
	r = a.run("run", "--image", ref, "-e", "GREETING=hi there", "-w", "/tmp", "-u", "app", "--", "sh", "-c", `echo "$GREETING|$(pwd)|$(id -u):$(id -g)"`)
	if r.code != 0 || r.stdout != "hi there|/tmp|1000:1000\n" {
		t.Fatalf("env/workdir/user: %v", r)
	}
}

func TestRunTimeout(t *testing.T) {
	a, ref := withRegistry(t)
	r := a.run("run", "--image", ref, "--timeout", "1s", "--", "sh", "-c", "trap '' TERM; sleep 30")
	if r.code != 124 || !strings.Contains(r.stderr, "timeout") || r.took > 15*time.Second {
		t.Fatalf("timeout: %v", r)
	}
}

func TestRunSIGTERMStopsSandbox(t *testing.T) {
	a, ref := withRegistry(t)
	a.run("images", "pull", ref)
	c := a.cmd(t.Context(), "run", "--image", ref, "--", "sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	c.Process.Signal(syscall.SIGTERM)
	err := c.Wait()
	code := c.ProcessState.ExitCode()
	if code != 143 || time.Since(start) > 10*time.Second {
		t.Fatalf("SIGTERM: exit %d (%v) after %v", code, err, time.Since(start))
	}
}

// TestRunSIGINTEndsPromptly: Ctrl-C (SIGINT to agentkernel) ends a shell
// waiting for its child at once, as in a terminal, with 130, for a run
// and for an exec in a persistent sandbox. The host's sh (dash on
// Debian) waits for its child on SIGINT, so only the job's whole process
// group getting it ends the command promptly.
func TestRunSIGINTEndsPromptly(t *testing.T) {
	a := newAK(t)
	interrupt(t, a, "run", "--image", "host", "--", "sh", "-c", "echo ready; sleep 300")
	a.must("sandbox", "create", "sigbox", "--image", "host", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "sigbox") })
	interrupt(t, a, "exec", "sigbox", "--", "sh", "-c", "echo ready; sleep 300")
}

// TestRunThroughDaemonSIGINTAndOOM: a run the daemon serves from its warm
// pool ends on Ctrl-C as a direct run does, and says so the same way when
// the memory limit killed its command.
func TestRunThroughDaemonSIGINTAndOOM(t *testing.T) {
	a := newAK(t)
	if r := a.run("daemon", "start"); r.code != 0 {
		t.Fatalf("daemon start: %v", r)
	}
	t.Cleanup(func() { a.run("daemon", "stop") })
	hog := []string{"run", "--image", "host", "--memory", "16m", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"}
	direct := a.run(append([]string{"--no-daemon"}, hog...)...)
	if direct.code != 137 || !strings.Contains(direct.stderr, "the command was killed: out of memory (limit 16 MiB)") {
		t.Fatalf("direct: %v", direct)
	}
	// The first run of a spec makes its pool, the second takes from it.
	for i := 0; i < 2; i++ {
		if r := a.run(hog...); r.code != direct.code || r.stderr != direct.stderr {
			t.Errorf("through the daemon (%d): %v\ndirect: %v", i, r, direct)
		}
	}
	for i := 0; i < 2; i++ {
		interrupt(t, a, "run", "--image", "host", "--", "sh", "-c", "echo ready; sleep 300")
	}
	r := a.run("daemon", "status", "--json")
	var st struct {
		PoolRuns map[string]int `json:"pool_runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.PoolRuns["hit"] < 2 {
		t.Errorf("the daemon served %v of these runs from its pool: %v %v", st.PoolRuns, r, err)
	}
}

// interrupt runs agentkernel with args, waits for the command's "ready"
// line and sends agentkernel SIGINT: it must end with 130 at once.
func interrupt(t *testing.T, a *ak, args ...string) {
	t.Helper()
	c := a.cmd(t.Context(), args...)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	c.Stderr = &stderr
	// The command may hold the stderr pipe after agentkernel is gone.
	c.WaitDelay = time.Second
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		_ = c.Process.Kill()
		_ = c.Wait()
		t.Fatalf("%v: %q %v; stderr %q", args, buf, err, stderr.String())
	}
	time.Sleep(200 * time.Millisecond) // sleep is running
	start := time.Now()
	_ = c.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
	took := time.Since(start)
	// A run's grace period for a command that outlives an interrupt is
	// 3 s; an exec has none.
	if code := c.ProcessState.ExitCode(); code != 130 || took > 1500*time.Millisecond {
		t.Fatalf("%v: SIGINT: exit %d after %v, want 130 at once; stderr %q", args, code, took, stderr.String())
	}
}

// TestRunOOMSaysSo: a command the memory limit killed exits 137 with a
// line naming the limit and the flag that raises it; a plain SIGKILL
// says nothing, and a killed child is told about as a warning.
func TestRunOOMSaysSo(t *testing.T) {
	a, ref := withRegistry(t)
	a.run("images", "pull", ref)
	// One process that needs 100 MiB: the OOM killer's only choice.
	hog := []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"}
	r := a.run(append([]string{"run", "--image", ref, "--memory", "16m", "--"}, hog...)...)
	want := "agentkernel: the command was killed: out of memory (limit 16 MiB); raise it with --memory"
	if r.code != 137 || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("over the limit: %v", r)
	}
	r = a.run("run", "--image", ref, "--memory", "16m", "--", "sh", "-c", "kill -9 $$")
	if r.code != 137 || r.stderr != "" {
		t.Fatalf("plain SIGKILL: %v", r)
	}
	r = a.run(append([]string{"run", "--image", ref, "--memory", "16m", "--", "sh", "-c", `"$@" 2>/dev/null; echo child $?`, "sh"}, hog...)...)
	if r.code != 0 || r.stdout != "child 137\n" || !strings.Contains(r.stderr, "agentkernel: warning: a process in the sandbox was killed: out of memory (limit 16 MiB)") {
		t.Fatalf("child over the limit: %v", r)
	}
}

// TestSandboxGCOnlyItsDataDir: a run killed with its agentkernel leaves
// its cgroup behind; 'sandbox gc' of another data directory leaves it
// alone, that of the run's own removes it.
func TestSandboxGCOnlyItsDataDir(t *testing.T) {
	a, other := newAK(t), newAK(t)
	c := a.cmd(t.Context(), "run", "--image", "host", "--memory", "64m", "--", "sh", "-c", "echo ready; sleep 30")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		_ = c.Process.Kill()
		_ = c.Wait()
		t.Fatalf("%q %v", buf, err)
	}
	// The run's cgroups: those holding a child of agentkernel.
	var dirs []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(p, "/") > 12 {
			return filepath.SkipDir
		}
		if !strings.HasPrefix(d.Name(), "agentkernel-") {
			return nil
		}
		procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, pid := range strings.Fields(string(procs)) {
			st, _ := os.ReadFile("/proc/" + pid + "/status")
			if strings.Contains(string(st), "\nPPid:\t"+strconv.Itoa(c.Process.Pid)+"\n") {
				dirs = append(dirs, p)
				break
			}
		}
		return filepath.SkipDir
	})
	_ = c.Process.Kill()
	_ = c.Wait()
	if len(dirs) == 0 {
		t.Fatal("the run has no cgroup: nothing to test")
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	})
	// Empty once the sandbox died with agentkernel, and older than the
	// grace period gc gives cgroups still being joined.
	old := time.Now().Add(-time.Hour)
	for _, d := range dirs {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if len(procs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still holds %q", d, procs)
			}
		}
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	r := other.run("sandbox", "gc")
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil || strings.Contains(r.stdout, d) {
			t.Errorf("gc of another data directory removed %s: %v", d, r)
		}
	}
	r = a.run("sandbox", "gc")
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil || !strings.Contains(r.stdout, "removed "+d+"\n") {
			t.Errorf("gc of its own data directory left %s: %v", d, r)
		}
	}
}

func TestRunProfilesWorkspace(t *testing.T) {
	a, ref := withRegistry(t)
	if err := os.WriteFile(filepath.Join(a.dir, "existing.txt"), []byte("project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// moderate: copy-on-write, the host copy never changes.
	r := a.run("run", "--image", ref, "--", "sh", "-c", "cat /workspace/existing.txt && echo new > /workspace/new.txt && echo changed > /workspace/existing.txt && cat /workspace/new.txt")
	if r.code != 0 || r.stdout != "project\nnew\n" {
		t.Fatalf("moderate: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "new.txt")); !os.IsNotExist(err) {
		t.Fatalf("moderate: a file written in the sandbox reached the host (%v)", err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.dir, "existing.txt")); string(b) != "project\n" {
		t.Fatalf("moderate: host file changed to %q", b)
	}
	// permissive: read-write bind.
	r = a.run("run", "--image", ref, "-p", "permissive", "--", "sh", "-c", "echo written > /workspace/perm.txt")
	if r.code != 0 {
		t.Fatalf("permissive: %v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(a.dir, "perm.txt")); string(b) != "written\n" {
		t.Fatalf("permissive: write did not reach the host: %q", b)
	}
	// restrictive: no workspace, read-only root, writable /tmp.
	r = a.run("run", "--image", ref, "-p", "restrictive", "--", "sh", "-c", "ls /workspace 2>/dev/null && echo visible; touch /x 2>/dev/null && echo root-writable; touch /tmp/ok && echo tmp-ok")
	if r.code != 0 || r.stdout != "tmp-ok\n" {
		t.Fatalf("restrictive: %v", r)
	}
	// It says where the command runs instead of the project, once,
	// unless -w and -v place it; the other profiles run in the project.
	r = a.run("run", "--image", ref, "-p", "restrictive", "--", "pwd")
	if r.code != 0 || r.stdout != "/\n" || strings.Count(r.stderr, "\n") != 1 ||
		!strings.Contains(r.stderr, "agentkernel: warning: the restrictive profile does not mount the project directory: the command runs in the image's working directory (/ unless the image sets one)") {
		t.Fatalf("restrictive pwd: %v", r)
	}
	r = a.run("run", "--image", ref, "-p", "restrictive", "-v", ".:/workspace:ro", "-w", "/workspace", "--", "cat", "existing.txt")
	if r.code != 0 || r.stdout != "project\n" || r.stderr != "" {
		t.Fatalf("restrictive with the project read-only: %v", r)
	}
	for _, p := range []string{"moderate", "permissive"} {
		if r = a.run("run", "--image", ref, "-p", p, "--", "pwd"); r.code != 0 || r.stdout != "/workspace\n" || r.stderr != "" {
			t.Fatalf("%s pwd: %v", p, r)
		}
	}
}

func TestRunIsolation(t *testing.T) {
	a, ref := withRegistry(t)
	r := a.run("run", "--image", ref, "--", "sh", "-c", "id -u; hostname; cat /proc/self/uid_map | tr -s ' '; echo x > /proc/sys/kernel/core_pattern 2>/dev/null && echo core-pattern-writable; ls /proc | grep -c '^[0-9]'")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 4 {
		t.Fatalf("isolation: %v", r)
	}
	if lines[0] != "0" || lines[1] != "agentkernel" {
		t.Errorf("want root inside and hostname agentkernel: %q", lines[:2])
	}
	if f := strings.Fields(lines[2]); len(f) != 3 || f[1] == "0" {
		t.Errorf("root inside must map to an unprivileged host uid, uid_map %q", lines[2])
	}
	if n := lines[3]; n == "" || len(n) > 1 {
		t.Errorf("the sandbox must see only its own few processes, saw %s", n)
	}
}

// TestRunPrestartedThread: as root, run builds its sandbox on the thread
// whose namespaces were made while agentkernel started up, and that
// sandbox is as isolated as any: its own network (lo, and eth0 to its
// network helper), hostname and PID namespace.
func TestRunPrestartedThread(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the thread is prestarted on amd64 only")
	}
	testenv.RequireRoot(t) // the thread is prestarted for root
	a, ref := withRegistry(t)
	a.env = append(a.env, "AGENTKERNEL_TRACE_STAGES=1")
	r := a.run("-q", "run", "--image", ref, "--", "sh", "-c", "hostname; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; tr -d '\\000' < /proc/1/cmdline; echo; echo $$")
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	if !strings.Contains(r.stderr, "thread: prestarted") {
		t.Errorf("the sandbox was not built on the prestarted thread; stages:\n%s", r.stderr)
	}
	if want := "agentkernel\nlo\neth0\nagentkernel:init\n2\n"; r.stdout != want {
		t.Errorf("inside: %q, want %q", r.stdout, want)
	}

	// Attacks from inside the prestarted sandbox: each must fail. The
	// attack battery (test/attack) covers the same fences through the
	// backend; this is the path where the namespaces, PID 1 and its
	// staged mounts were made during start-up.
	for _, attack := range []struct{ name, script string }{
		{"write core_pattern", "echo '|/tmp/x' > /proc/sys/kernel/core_pattern"},
		{"read a masked /proc file", "[ -n \"$(head -c 1 /proc/timer_list)\" ]"},
		{"remove a mask", "umount /proc/timer_list || umount /sys/firmware"},
		{"mount a file system", "mount -t tmpfs x /mnt"},
		{"write sysfs", "echo 1 > /sys/kernel/mm/ksm/run"},
		{"make a device", "mknod /tmp/sda b 8 0"},
		{"new namespaces", "unshare -n true || unshare -m true"},
		{"signal PID 1", "kill -9 1 && sleep 1 && [ ! -e /proc/1 ]"},
		{"leave the cgroup", "for f in /sys/fs/cgroup/*/cgroup.procs /sys/fs/cgroup/cgroup.procs; do echo $$ > $f && exit 0; done; exit 1"},
	} {
		r := a.run("-q", "run", "--image", ref, "--", "sh", "-c", "("+attack.script+") 2>/dev/null")
		if r.code == 0 {
			t.Errorf("%s: succeeded inside the sandbox (%v)", attack.name, r)
		}
	}
}

func TestRunHostFallbackOffline(t *testing.T) {
	a := newAK(t)
	// sh detects alpine:3.20, which is not cached and Docker Hub is not
	// reachable from a test: the run falls back to the host's tools.
	r := a.run("run", "--", "sh", "-c", "echo fallback-ok")
	if r.code != 0 || r.stdout != "fallback-ok\n" || !strings.Contains(r.stderr, "host") {
		t.Fatalf("auto-detected image offline must fall back to host: %v", r)
	}
	// A named image never falls back.
	r = a.run("run", "--image", "127.0.0.1:1/nothing:1", "--", "true")
	if r.code != 125 || strings.Contains(r.stdout, "fallback") {
		t.Fatalf("an explicit image must not fall back: %v", r)
	}
}

func TestRunAutoDetectedCachedImage(t *testing.T) {
	a := newAK(t)
	// Load a docker-save tarball tagged alpine:3.20: auto-detection of "sh"
	// then finds it in the cache and runs it rather than the host.
	tag, err := name.NewTag("alpine:3.20")
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "alpine.tar")
	if err := tarball.WriteToFile(tarPath, tag, testImage(t, "loaded-alpine")); err != nil {
		t.Fatal(err)
	}
	if r := a.run("images", "load", "-i", tarPath); r.code != 0 {
		t.Fatalf("images load: %v", r)
	}
	r := a.run("run", "--", "cat", "/etc/agentkernel-test")
	if r.code != 0 || r.stdout != "loaded-alpine\n" || strings.Contains(r.stderr, "host") {
		t.Fatalf("auto-detected cached image: %v", r)
	}
	r = a.run("detect", "--", "sh")
	if !strings.Contains(r.stdout, "alpine:3.20") {
		t.Fatalf("detect: %v", r)
	}
}

func TestRunBadInput(t *testing.T) {
	a, ref := withRegistry(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--image", ref, "--network", "--", "true"}, "network"},
		{[]string{"run", "--image", ref, "--network", "open", "--", "true"}, "unknown network mode"},
		{[]string{"run", "--image", ref, "--allow-cidr", "10.0.0.0/99", "--", "true"}, "invalid address range"},
		{[]string{"run", "--image", ref, "-P", "0:80", "--", "true"}, "invalid port mapping"},
		{[]string{"run", "--image", ref, "--network", "none", "-P", "8080:80", "--", "true"}, "need network access"},
		{[]string{"run", "--image", ref, "-p", "nope", "--", "true"}, "profile"},
		{[]string{"run", "--image", ref, "--memory", "lots", "--", "true"}, "memory"},
		{[]string{"run", "--image", ref, "-B", "microvm", "--", "true"}, "not built yet"},
		{[]string{"run", "--image", "UPPER/Case::bad", "--", "true"}, ""},
	} {
		r := a.run(c.args...)
		if r.code != 125 || !strings.Contains(r.stderr, "agentkernel: ") || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: want exit 125 with a one-line error about %q: %v", c.args, c.want, r)
		}
	}
}

func TestRunDryRun(t *testing.T) {
	a := newAK(t)
	r := a.run("run", "--dry-run", "-p", "restrictive", "--", "python3", "x.py")
	if r.code != 0 || !strings.Contains(r.stdout, `"image": "python:3.12-alpine"`) || !strings.Contains(r.stdout, `"read_only_root": true`) {
		t.Fatalf("dry-run: %v", r)
	}
}
