package e2e

import (
	"os"
	"path/filepath"
	"runtime"
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
		{[]string{"run", "--image", ref, "-B", "gvisor", "--", "true"}, "not built yet"},
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
