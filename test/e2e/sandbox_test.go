//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/agent"
)

// sandboxInfo is the part of `sandbox info --json` the tests read.
type sandboxInfo struct {
	Name          string            `json:"name"`
	Status        string            `json:"status"`
	StopReason    string            `json:"stop_reason"`
	Labels        map[string]string `json:"labels"`
	SupervisorPID int               `json:"supervisor_pid"`
}

func (a *ak) must(args ...string) result {
	a.t.Helper()
	r := a.run(args...)
	if r.code != 0 {
		a.t.Fatalf("agentkernel %v: %v", args, r)
	}
	return r
}

// mustSay runs agentkernel args (each must succeed) every 100 ms until
// its output is want, for up to 15 s.
func (a *ak) mustSay(want string, args ...string) {
	a.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		r := a.must(args...)
		if r.stdout == want {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("agentkernel %v did not come to say %q: %v", args, want, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *ak) info(name string) sandboxInfo {
	a.t.Helper()
	var i sandboxInfo
	r := a.must("sandbox", "info", "--json", name)
	if err := json.Unmarshal([]byte(r.stdout), &i); err != nil {
		a.t.Fatalf("info: %v\n%s", err, r.stdout)
	}
	return i
}

// newSandbox creates and starts a sandbox of the test image; it is
// removed (forcefully) at the end of the test.
func newSandbox(t *testing.T, name string, extra ...string) (*ak, string) {
	t.Helper()
	a, ref := withRegistry(t)
	a.must(append([]string{"sandbox", "create", name, "--image", ref}, extra...)...)
	a.must("sandbox", "start", name)
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", name) })
	return a, ref
}

func TestSandboxLifecycle(t *testing.T) {
	a, _ := newSandbox(t, "life", "--label", "team=ml", "--description", "e2e")
	// Exit codes.
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 42"}, 42},
		{[]string{"no-such-command"}, 127},
		{[]string{"/etc/passwd"}, 126},
		{[]string{"sh", "-c", "kill -9 $$"}, 137},
	} {
		if r := a.run(append([]string{"exec", "life", "--"}, c.args...)...); r.code != c.want {
			t.Errorf("exec %v: want %d, got %v", c.args, c.want, r)
		}
	}
	// Same isolation as run: own user namespace (root inside, not
	// outside), no_new_privs, seccomp.
	r := a.must("exec", "life", "--", "sh", "-c", "id -u; grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; cat /proc/self/uid_map")
	// Root maps to a block of systemd's container range (524288 on).
	if f := strings.Fields(r.stdout); !strings.HasPrefix(r.stdout, "0\n") || !strings.Contains(r.stdout, "NoNewPrivs:\t1") || !strings.Contains(r.stdout, "Seccomp:\t2") ||
		len(f) < 3 || f[len(f)-3] != "0" || f[len(f)-1] != "65536" || atoiOr(f[len(f)-2], 0) < 524288 {
		t.Errorf("exec isolation: %v", r)
	}
	// stdin, env, workdir.
	a.stdin = "from stdin\n"
	r = a.must("exec", "-i", "-e", "FOO=bar", "-w", "/tmp", "life", "--", "sh", "-c", "cat; echo $FOO; pwd")
	a.stdin = ""
	if r.stdout != "from stdin\nbar\n/tmp\n" {
		t.Errorf("stdin/env/workdir: %v", r)
	}
	// Without -i stdin is empty.
	a.stdin = "ignored\n"
	if r := a.must("exec", "life", "--", "cat"); r.stdout != "" {
		t.Errorf("stdin without -i: %v", r)
	}
	a.stdin = ""
	// Files written by exec, cp in both directions.
	a.must("exec", "life", "--", "sh", "-c", "mkdir -p /root/data && echo kept > /root/data/kept.txt")
	host := t.TempDir()
	a.must("cp", "life:/root/data/kept.txt", filepath.Join(host, "out.txt"))
	if b, _ := os.ReadFile(filepath.Join(host, "out.txt")); string(b) != "kept\n" {
		t.Errorf("cp out: %q", b)
	}
	src := filepath.Join(host, "tree")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "f.txt"), []byte("in\n"), 0o644)
	os.Symlink("sub/f.txt", filepath.Join(src, "link"))
	a.must("cp", src, "life:/root/data/")
	if r := a.must("exec", "life", "--", "sh", "-c", "cat /root/data/tree/sub/f.txt /root/data/tree/link; stat -c %u /root/data/tree/sub/f.txt"); r.stdout != "in\nin\n0\n" {
		t.Errorf("cp in: %v", r)
	}
	// Like docker cp: no directory is made up on the way.
	for _, d := range []string{"life:/root/nodir/", "life:/root/nodir/f.txt"} {
		if r := a.run("cp", filepath.Join(src, "sub", "f.txt"), d); r.code != 125 || !strings.Contains(r.stderr, "no such directory") {
			t.Errorf("cp into %s: %v", d, r)
		}
	}
	if r := a.run("exec", "life", "--", "test", "-e", "/root/nodir"); r.code == 0 {
		t.Errorf("cp created /root/nodir")
	}
	a.must("cp", filepath.Join(src, "sub", "f.txt"), "life:/root/data/renamed.txt")
	if r := a.must("exec", "life", "--", "cat", "/root/data/renamed.txt"); r.stdout != "in\n" {
		t.Errorf("cp to a new name: %v", r)
	}
	a.must("cp", "life:/root/data/tree", filepath.Join(host, "back"))
	if b, _ := os.ReadFile(filepath.Join(host, "back", "sub", "f.txt")); string(b) != "in\n" {
		t.Errorf("cp dir out: %q", b)
	}
	if l, _ := os.Readlink(filepath.Join(host, "back", "link")); l != "sub/f.txt" {
		t.Errorf("cp out symlink: %q", l)
	}
	// list from separate processes, label filter.
	if r := a.must("sandbox", "list", "--label", "team=ml"); !strings.Contains(r.stdout, "life") || !strings.Contains(r.stdout, "running") {
		t.Errorf("list: %v", r)
	}
	if r := a.must("sandbox", "list", "--label", "team=other"); strings.Contains(r.stdout, "life") {
		t.Errorf("list filter: %v", r)
	}
	// stop → start keeps files.
	a.must("sandbox", "stop", "life")
	if i := a.info("life"); i.Status != "stopped" {
		t.Errorf("after stop: %+v", i)
	}
	if r := a.run("exec", "life", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("exec on stopped: %v", r)
	}
	a.must("sandbox", "start", "life")
	if r := a.must("exec", "life", "--", "cat", "/root/data/kept.txt"); r.stdout != "kept\n" {
		t.Errorf("after restart: %v", r)
	}
	a.must("sandbox", "rm", "--force", "life")
	if r := a.must("sandbox", "list", "--all"); strings.Contains(r.stdout, "life") {
		t.Errorf("after rm: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "sandboxes", "life")); !os.IsNotExist(err) {
		t.Errorf("sandbox directory left: %v", err)
	}
}

func TestSandboxSupervisorKilled(t *testing.T) {
	a, _ := newSandbox(t, "crashy")
	a.must("exec", "crashy", "--", "sh", "-c", "echo x > /root/x")
	sup := a.info("crashy").SupervisorPID
	if sup <= 0 {
		t.Fatal("no supervisor pid")
	}
	_, ini, err := sandboxPids(a.dataDir, "crashy")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for (running(sup) || running(ini)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if running(ini) {
		t.Fatalf("the init (pid %d) outlived its killed supervisor", ini)
	}
	i := a.info("crashy")
	if i.Status != "stopped" || !strings.Contains(i.StopReason, "exited unexpectedly") {
		t.Fatalf("after kill -9: %+v", i)
	}
	if r := a.must("sandbox", "list", "--all"); !strings.Contains(r.stdout, "stopped") {
		t.Errorf("list: %v", r)
	}
	a.must("sandbox", "start", "crashy")
	if r := a.must("exec", "crashy", "--", "cat", "/root/x"); r.stdout != "x\n" {
		t.Errorf("after recovery: %v", r)
	}
	sup = a.info("crashy").SupervisorPID
	syscall.Kill(sup, syscall.SIGKILL)
	for syscall.Kill(sup, 0) == nil && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	a.must("sandbox", "gc")
	// No process, mount or cgroup of the sandbox is left.
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(cmd), a.dataDir) {
			t.Errorf("process left: %s %q", e.Name(), cmd)
		}
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), a.dataDir) {
		t.Errorf("mount left under %s", a.dataDir)
	}
}

func TestSandboxHostileSymlinks(t *testing.T) {
	a, _ := newSandbox(t, "hostile")
	secret := filepath.Join(t.TempDir(), "host-secret")
	os.WriteFile(secret, []byte("HOST SECRET\n"), 0o600)
	hostDir := t.TempDir()
	a.must("exec", "hostile", "--", "sh", "-c", "ln -s / /root/x && ln -s "+secret+" /root/sec && ln -s ../../../../.. /root/up && mkdir -p "+hostDir)
	for _, p := range []string{"/root/x" + secret, "/root/sec", "/root/up" + secret, "/root/x/etc/shadow"} {
		out := filepath.Join(t.TempDir(), "out")
		a.run("cp", "hostile:"+p, out)
		if b, _ := os.ReadFile(out); strings.Contains(string(b), "HOST SECRET") {
			t.Errorf("cp hostile:%s read the host's file", p)
		}
		if hs, _ := os.ReadFile("/etc/shadow"); len(hs) > 0 {
			if b, _ := os.ReadFile(out); string(b) == string(hs) {
				t.Errorf("cp hostile:%s read the host's /etc/shadow", p)
			}
		}
	}
	// Writes through the links land inside the sandbox.
	src := filepath.Join(t.TempDir(), "pwned")
	os.WriteFile(src, []byte("pwned\n"), 0o644)
	for _, p := range []string{"/root/x" + hostDir + "/", "/root/up" + hostDir + "/"} {
		a.run("cp", src, "hostile:"+p)
		if _, err := os.Stat(filepath.Join(hostDir, "pwned")); err == nil {
			t.Fatalf("cp to hostile:%s wrote on the host", p)
		}
	}
	if r := a.must("exec", "hostile", "--", "cat", hostDir+"/pwned"); r.stdout != "pwned\n" {
		t.Errorf("the copy should have landed inside: %v", r)
	}
	// /proc, /sys, /dev are refused, also through a link.
	a.must("exec", "hostile", "--", "ln", "-s", "/proc", "/root/p")
	for _, p := range []string{"/proc/1/environ", "/root/p/1/environ", "/root/p/self/root/etc/passwd", "/dev/null", "/root/x/proc/1/mem"} {
		if r := a.run("cp", "hostile:"+p, filepath.Join(t.TempDir(), "o")); r.code == 0 {
			t.Errorf("cp hostile:%s should be refused: %v", p, r)
		}
	}
}

func TestSandboxNames(t *testing.T) {
	a := newAK(t)
	for _, bad := range []string{"a--b", "-a", "a_", "a b", "a/b", strings.Repeat("x", 64)} {
		r := a.run("sandbox", "create", "--image", "host", "--", bad)
		if r.code != 125 || !strings.Contains(r.stderr, "sandbox name") {
			t.Errorf("name %q: %v", bad, r)
		}
	}
	if r := a.run("sandbox", "start", "nope"); r.code != 125 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("unknown sandbox: %v", r)
	}
}

func TestSandboxTTLAndGC(t *testing.T) {
	a, ref := withRegistry(t)
	a.must("sandbox", "create", "short", "--image", ref, "--ttl", "1ms")
	a.must("sandbox", "create", "long", "--image", ref, "--ttl", "1h")
	time.Sleep(5 * time.Millisecond)
	if r := a.must("sandbox", "gc", "--dry-run"); !strings.Contains(r.stdout, "short") || strings.Contains(r.stdout, "long") {
		t.Errorf("gc dry run: %v", r)
	}
	a.must("sandbox", "gc")
	if r := a.must("sandbox", "list", "--all"); strings.Contains(r.stdout, "short") || !strings.Contains(r.stdout, "long") {
		t.Errorf("after gc: %v", r)
	}
}

// BenchmarkSandboxExec measures `exec NAME -- /bin/true` round trips:
// "rpc" through the supervisor client (what the API server will pay),
// "cli" the whole agentkernel process.
func BenchmarkSandboxExec(b *testing.B) {
	t := &testing.T{}
	_ = t
	a := &ak{dataDir: b.TempDir(), home: b.TempDir(), dir: b.TempDir()}
	a.t = nil
	run := func(args ...string) {
		c := a.cmd(context.Background(), args...)
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("sandbox", "create", "bench", "--image", "host")
	run("sandbox", "start", "bench")
	defer run("sandbox", "rm", "--force", "bench")
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer devnull.Close()
	b.Run("rpc", func(b *testing.B) {
		c, err := agent.Dial(filepath.Join(a.dataDir, "sandboxes", "bench", "sock"))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		took := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			ws, err := c.Exec(context.Background(), agent.ExecRequest{Args: []string{"/bin/true"}}, devnull, devnull, devnull, nil)
			if err != nil || ws.ExitStatus() != 0 {
				b.Fatal(err, ws)
			}
			took = append(took, time.Since(t0))
		}
		reportMedian(b, took)
	})
	b.Run("cli", func(b *testing.B) {
		took := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			run("exec", "bench", "--", "/bin/true")
			took = append(took, time.Since(t0))
		}
		reportMedian(b, took)
	})
}

// reportMedian adds the median round trip to the benchmark's output.
func reportMedian(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-median")
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(st), ") Z ")
}

// atoiOr parses s, or returns def.
func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}
