//go:build vmguest

package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
)

// The guest's layout, made by scripts/vmtest/init.sh.
const (
	// cgroupRoot is the unified hierarchy, the only one mounted.
	cgroupRoot = "/sys/fs/cgroup"
	// delegated is the subtree chowned to the test user, as systemd
	// delegates user@UID.service; rootless runs start in its leaf
	// delegatedLeaf, so that their parent (where agentkernel makes its
	// cgroups) is delegated.
	delegated     = cgroupRoot + "/deleg"
	delegatedLeaf = delegated + "/tester"
	// testUID is the test user's uid and gid.
	testUID = 1000
)

// binary is the agentkernel binary (agentkernel-full beside it).
var binary string

func TestMain(m *testing.M) {
	switch os.Getenv("AGENTKERNEL_VM_GUEST") {
	case "1", "container":
	default:
		fmt.Println("FAIL: test/vm runs only inside the guest that scripts/vmtest.sh boots (AGENTKERNEL_VM_GUEST=1) or the containers of scripts/podmantest.sh (AGENTKERNEL_VM_GUEST=container)")
		os.Exit(1)
	}
	binary = os.Getenv("AGENTKERNEL_VM_BIN")
	if _, err := os.Stat(binary); err != nil {
		fmt.Printf("FAIL: AGENTKERNEL_VM_BIN: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestGuestIsPureCgroupV2: the rest proves nothing unless the guest is
// what the job promises: the 6.1 kernel, only the unified hierarchy
// mounted, no controller on v1, and the delegated subtree in place.
func TestGuestIsPureCgroupV2(t *testing.T) {
	requireQEMUGuest(t)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	if rel := unix.ByteSliceToString(u.Release[:]); !strings.HasPrefix(rel, "6.1.") {
		t.Errorf("kernel %s, want 6.1.x", rel)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Errorf("%s is not cgroup2 (type %#x, %v)", cgroupRoot, st.Type, err)
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "cgroup" {
			t.Errorf("a cgroup v1 hierarchy is mounted: %s", line)
		}
	}
	// cgroup_no_v1=all: every controller's hierarchy id is 0 (v2).
	cg, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(cg), "\n")[1:] {
		if f := strings.Fields(line); len(f) == 4 && f[1] != "0" {
			t.Errorf("controller %s is on a v1 hierarchy (%s)", f[0], line)
		}
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		ctl, err := os.ReadFile(delegated + "/cgroup.subtree_control")
		if err != nil || !strings.Contains(string(ctl), c) {
			t.Errorf("%s: controller %s not enabled for the delegated subtree: %q %v", delegated, c, ctl, err)
		}
	}
	if err := unix.Access(delegated+"/cgroup.procs", unix.W_OK); err != nil {
		t.Errorf("delegated subtree: %v", err)
	}
	var s unix.Stat_t
	if err := unix.Stat(delegated, &s); err != nil || s.Uid != testUID {
		t.Errorf("%s is not the test user's (uid %d, %v)", delegated, s.Uid, err)
	}
}

// requireQEMUGuest skips a check of the QEMU guest's own layout in the
// containers of scripts/podmantest.sh.
func requireQEMUGuest(t *testing.T) {
	if os.Getenv("AGENTKERNEL_VM_GUEST") != "1" {
		t.Skip("a check of scripts/vmtest.sh's guest")
	}
}

// user is who runs agentkernel: root, or the test user in the leaf of
// its delegated subtree.
type user struct {
	name     string
	rootless bool
	// cgroupParent is where agentkernel makes the sandboxes' cgroups.
	cgroupParent string
	// leaf is the cgroup a rootless user's agentkernel starts in ("":
	// the caller's own).
	leaf string
}

var users = []user{
	{name: "root", cgroupParent: cgroupRoot + "/agentkernel"},
	{name: "rootless", rootless: true, cgroupParent: delegated, leaf: delegatedLeaf},
}

// undelegated is the test user started in a cgroup whose parent is
// root's (scripts/vmtest/init.sh makes it): no delegation.
var undelegated = user{name: "undelegated", rootless: true, cgroupParent: cgroupRoot + "/nodeleg", leaf: cgroupRoot + "/nodeleg/tester"}

// runner runs the built agentkernel as u with a data directory and HOME
// of its own.
type runner struct {
	t       *testing.T
	u       user
	dataDir string
	home    string
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %q\nstderr: %q", r.code, r.stdout, r.stderr)
}

// ownedDir makes a directory the user may use: on the guest's ext4 disk
// (TMPDIR), where idmapped mounts work, unlike the initramfs's tmpfs on
// 6.1; t.TempDir's parents are root's alone (0700).
func ownedDir(t *testing.T, u user, what string) string {
	t.Helper()
	d, err := os.MkdirTemp("", "vm-"+u.name+"-"+what+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if u.rootless {
		if err := os.Chown(d, testUID, testUID); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func newRunner(t *testing.T, u user) *runner {
	return &runner{t: t, u: u, dataDir: ownedDir(t, u, "data"), home: ownedDir(t, u, "home")}
}

func (r *runner) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, binary, append([]string{"--data-dir", r.dataDir}, args...)...)
	c.Dir = r.home
	c.Env = []string{"HOME=" + r.home, "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + filepath.Join(r.home, ".config")}
	c.WaitDelay = 5 * time.Second
	if r.u.rootless {
		c.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: testUID, Gid: testUID, Groups: []uint32{}},
		}
		if r.u.leaf != "" {
			leaf, err := os.Open(r.u.leaf)
			if err != nil {
				r.t.Fatal(err)
			}
			r.t.Cleanup(func() { leaf.Close() })
			c.SysProcAttr.UseCgroupFD = true
			c.SysProcAttr.CgroupFD = int(leaf.Fd())
		}
	}
	return c
}

// run runs agentkernel with args to its end (at most 3 minutes: the
// guest's CPU is emulated).
func (r *runner) run(args ...string) result {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := r.cmd(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			r.t.Fatalf("agentkernel %v: %v", args, err)
		}
		res.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.t.Fatalf("agentkernel %v died of %v; stderr:\n%s", args, ws.Signal(), res.stderr)
		}
	}
	if strings.Contains(res.stderr, "goroutine ") || strings.Contains(res.stderr, "panic:") {
		r.t.Fatalf("agentkernel %v printed a Go stack trace:\n%s", args, res.stderr)
	}
	return res
}

func (r *runner) must(args ...string) result {
	r.t.Helper()
	res := r.run(args...)
	if res.code != 0 {
		r.t.Fatalf("agentkernel %v: %v", args, res)
	}
	return res
}

// sandboxCgroups are the agentkernel cgroups under the user's parent.
func (r *runner) sandboxCgroups() []string {
	m, _ := filepath.Glob(filepath.Join(r.u.cgroupParent, "agentkernel-*"))
	return m
}

// waitCgroup waits for a sandbox cgroup with a process in it.
func (r *runner) waitCgroup() string {
	r.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		for _, d := range r.sandboxCgroups() {
			if b, err := os.ReadFile(d + "/cgroup.procs"); err == nil && len(bytes.TrimSpace(b)) > 0 {
				return d
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatalf("no sandbox cgroup with a process under %s: %v", r.u.cgroupParent, r.sandboxCgroups())
	return ""
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// noLimitsWarning fails the test when agentkernel said it ran without
// limits: the delegated subtree is there to be used.
func noLimitsWarning(t *testing.T, res result) {
	t.Helper()
	if strings.Contains(res.stderr, "without limits") || strings.Contains(res.stderr, "cgroup") {
		t.Errorf("cgroup limits not applied: %v", res)
	}
}

// TestSandbox runs the checks that depend on cgroup v2, the namespaces
// and Landlock on this kernel, as root and as the delegated test user.
func TestSandbox(t *testing.T) {
	requireQEMUGuest(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "vm/busybox:1", imagetest.Image(t, imagetest.BusyboxConfig(),
		imagetest.Layer(t, imagetest.BusyboxFiles(t)...),
		imagetest.Layer(t, imagetest.Reg("etc/agentkernel-test", "vm guest\n"))))
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			a := newRunner(t, u)
			a.must("-q", "images", "pull", ref)
			for _, c := range []struct {
				name string
				f    func(t *testing.T, a *runner, ref string)
			}{
				{"Run", checkRun},
				{"Doctor", checkDoctor},
				{"SeccompLandlock", checkSeccompLandlock},
				{"MemoryLimit", checkMemory},
				{"PIDsLimit", checkPIDs},
				{"CPULimit", checkCPU},
				{"Persistent", checkPersistent},
				{"SnapshotFrozen", checkSnapshotFrozen},
			} {
				t.Run(c.name, func(t *testing.T) {
					a := *a
					a.t = t
					c.f(t, &a, ref)
				})
			}
			if left := a.sandboxCgroups(); len(left) != 0 {
				t.Errorf("cgroups left behind: %v", left)
			}
		})
	}
}

// checkRun: a run works, in a cgroup of its own below the expected
// parent, with the profile's limits and no warning.
func checkRun(t *testing.T, a *runner, ref string) {
	res := a.run("run", "--image", ref, "--", "sh", "-c", "cat /etc/agentkernel-test; id -u")
	if res.code != 0 || res.stdout != "vm guest\n0\n" {
		t.Fatalf("run: %v", res)
	}
	noLimitsWarning(t, res)
}

// checkSeccompLandlock: the command runs under a seccomp filter (mode 2)
// with no_new_privs, and Landlock refuses a device node on the writable
// root: EACCES, where without Landlock the capability check's EPERM is
// what refuses it (the native package's TestLandlock).
func checkSeccompLandlock(t *testing.T, a *runner, ref string) {
	res := a.run("run", "--image", ref, "--", "sh", "-c",
		`grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; mknod /node c 1 3; echo mknod $?; test -e /node && echo EXISTS; touch /newfile && echo WRITABLE`)
	if res.code != 0 {
		t.Fatalf("run: %v", res)
	}
	for _, want := range []string{"Seccomp:\t2\n", "NoNewPrivs:\t1\n", "mknod 1\n", "WRITABLE\n"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("want %q in the output: %v", want, res)
		}
	}
	if strings.Contains(res.stdout, "EXISTS") || !strings.Contains(res.stderr, "Permission denied") {
		t.Errorf("mknod must be refused by Landlock (EACCES, Permission denied): %v", res)
	}
}

// checkMemory: a command that needs 100 MiB under a 16 MiB limit is
// OOM-killed: exit 137 and the line that says so.
func checkMemory(t *testing.T, a *runner, ref string) {
	res := a.run("run", "--image", ref, "--memory", "16m", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1")
	want := "agentkernel: the command was killed: out of memory (limit 16 MiB); raise it with --memory"
	if res.code != 137 || !strings.Contains(res.stderr, want) {
		t.Fatalf("over the memory limit: %v", res)
	}
	// The same command under a limit it fits in succeeds: the kill was
	// the limit's.
	if res := a.run("run", "--image", ref, "--memory", "256m", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"); res.code != 0 {
		t.Fatalf("within the memory limit: %v", res)
	}
}

// checkPIDs: a fork bomb (bounded at 200 processes, so that a missing
// limit fails the test rather than the guest) stops at the pids limit.
func checkPIDs(t *testing.T, a *runner, ref string) {
	const limit = 20
	res := a.run("run", "--image", ref, "--pids", strconv.Itoa(limit), "--", "sh", "-c",
		`n=0; while [ $n -lt 200 ]; do sleep 300 & n=$((n+1)); echo $n; done; echo ALL`)
	lines := strings.Fields(res.stdout)
	if res.code == 0 || len(lines) == 0 || strings.Contains(res.stdout, "ALL") {
		t.Fatalf("fork bomb not stopped: %v", res)
	}
	n, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil || n >= limit || n < limit/2 {
		t.Errorf("the fork bomb started %q processes, want fewer than %d (and more than %d: the limit, not something else, stopped it): %v", lines[len(lines)-1], limit, limit/2, res)
	}
	if !regexp.MustCompile(`(?i)fork|resource temporarily unavailable`).MatchString(res.stderr) {
		t.Errorf("no fork failure reported: %v", res)
	}
}

// checkCPU: --cpus writes the quota into the sandbox cgroup's cpu.max
// and the kernel throttles a busy loop to it.
func checkCPU(t *testing.T, a *runner, ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := a.cmd(ctx, "run", "--image", ref, "--cpus", "0.2", "--timeout", "120s", "--", "sh", "-c", "echo busy; while :; do :; done")
	var errb bytes.Buffer
	c.Stderr = &errb
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Process.Signal(syscall.SIGTERM)
		_ = c.Wait()
	}()
	// The busy loop runs from here on.
	buf := make([]byte, 5)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "busy\n" {
		_ = c.Process.Kill()
		_ = c.Wait()
		t.Fatalf("the command did not start: %q %v; stderr %q", buf, err, errb.String())
	}
	d := a.waitCgroup()
	if got := readFile(t, d+"/cpu.max"); got != "20000 100000" {
		t.Errorf("%s/cpu.max = %q, want \"20000 100000\"", d, got)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		stat := readFile(t, d+"/cpu.stat")
		m := regexp.MustCompile(`(?m)^nr_throttled (\d+)$`).FindStringSubmatch(stat)
		if m != nil && m[1] != "0" {
			if c.ProcessState != nil {
				t.Fatalf("the run ended early: stderr %q", errb.String())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a busy loop under --cpus 0.2 was never throttled: %s\nstderr: %s", stat, errb.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkPersistent: a persistent sandbox starts (in a cgroup with the
// profile's limits), runs execs, stops and is removed with its cgroup.
func checkPersistent(t *testing.T, a *runner, ref string) {
	a.must("sandbox", "create", "vmbox", "--image", ref, "--memory", "300m", "--pids", "77", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "vmbox") })
	d := a.waitCgroup()
	// One more than asked: the exec stage armed for the next command
	// waits in the cgroup and is not one of the sandbox's processes.
	if got := readFile(t, d+"/pids.max"); got != "78" {
		t.Errorf("%s/pids.max = %q, want 78 (77 and the armed exec stage)", d, got)
	}
	if got := readFile(t, d+"/memory.max"); got != strconv.Itoa(300<<20) {
		t.Errorf("%s/memory.max = %q, want %d", d, got, 300<<20)
	}
	res := a.must("exec", "vmbox", "--", "sh", "-c", "echo state > /root/kept; grep Seccomp: /proc/self/status")
	if res.stdout != "Seccomp:\t2\n" {
		t.Errorf("exec: %v", res)
	}
	if res := a.must("exec", "vmbox", "--", "cat", "/root/kept"); res.stdout != "state\n" {
		t.Errorf("second exec: %v", res)
	}
	// stats reads the v2 cgroup's memory.current, pids.current and
	// cpu.stat.
	res = a.must("stats", "--json", "vmbox")
	var stats struct {
		Sandboxes []struct {
			Name        string  `json:"name"`
			CPUSeconds  float64 `json:"cpu_seconds"`
			MemoryBytes int64   `json:"memory_bytes"`
			Pids        int     `json:"pids"`
		} `json:"sandboxes"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &stats); err != nil || len(stats.Sandboxes) != 1 {
		t.Fatalf("stats: %v %v", err, res)
	}
	if s := stats.Sandboxes[0]; s.Name != "vmbox" || s.MemoryBytes <= 0 || s.Pids < 1 || s.CPUSeconds <= 0 {
		t.Errorf("stats of a running sandbox from its cgroup: %+v", s)
	}
	a.must("sandbox", "stop", "vmbox")
	if left := a.sandboxCgroups(); len(left) != 0 {
		t.Errorf("a stopped sandbox's cgroup is left: %v", left)
	}
	a.must("sandbox", "start", "vmbox")
	if res := a.must("exec", "vmbox", "--", "cat", "/root/kept"); res.stdout != "state\n" {
		t.Errorf("exec after a restart: %v", res)
	}
	a.must("sandbox", "rm", "--force", "vmbox")
	if left := a.sandboxCgroups(); len(left) != 0 {
		t.Errorf("a removed sandbox's cgroup is left: %v", left)
	}
}

// checkSnapshotFrozen: as root, a running sandbox's snapshot holds its
// processes still with cgroup v2's freezer (cgroup.freeze of its own
// cgroup) and lets them go after; a sandbox restored from it has the
// files. Rootless, such a snapshot is refused.
func checkSnapshotFrozen(t *testing.T, a *runner, ref string) {
	a.must("sandbox", "create", "snapbox", "--image", ref, "--start")
	t.Cleanup(func() {
		a.run("sandbox", "rm", "--force", "snapbox")
		a.run("sandbox", "rm", "--force", "snapbox2")
		a.run("snapshot", "delete", "vmsnap")
	})
	a.must("exec", "snapbox", "--", "sh", "-c", "echo kept > /root/f")
	if a.u.rootless {
		// A running sandbox's snapshot is root's alone (its files keep
		// their owners): refused with that reason, and the sandbox is
		// left running, not frozen.
		res := a.run("snapshot", "take", "snapbox", "--name", "vmsnap")
		if res.code == 0 || !strings.Contains(res.stderr, "needs root") {
			t.Errorf("rootless snapshot of a running sandbox: %v", res)
		}
		d := a.waitCgroup()
		if ev := readFile(t, d+"/cgroup.events"); !strings.Contains(ev, "frozen 0") {
			t.Errorf("the sandbox is frozen after a refused snapshot: %q", ev)
		}
		return
	}
	a.must("snapshot", "take", "snapbox", "--name", "vmsnap")
	d := a.waitCgroup()
	if ev := readFile(t, d+"/cgroup.events"); !strings.Contains(ev, "frozen 0") {
		t.Errorf("the sandbox stays frozen after its snapshot: %s/cgroup.events: %q", d, ev)
	}
	if got := readFile(t, d+"/cgroup.freeze"); got != "0" {
		t.Errorf("%s/cgroup.freeze = %q after the snapshot", d, got)
	}
	if res := a.must("exec", "snapbox", "--", "cat", "/root/f"); res.stdout != "kept\n" {
		t.Errorf("exec after the snapshot: %v", res)
	}
	a.must("snapshot", "restore", "vmsnap", "--as", "snapbox2")
	a.must("sandbox", "start", "snapbox2")
	if res := a.must("exec", "snapbox2", "--", "cat", "/root/f"); res.stdout != "kept\n" {
		t.Errorf("exec in the restored sandbox: %v", res)
	}
	a.must("sandbox", "rm", "--force", "snapbox")
	a.must("sandbox", "rm", "--force", "snapbox2")
	a.must("snapshot", "delete", "vmsnap")
}

// doctorReport is the part of 'doctor --json' these checks read.
type doctorReport struct {
	Checks []struct {
		Name    string `json:"name"`
		Status  string `json:"status"`
		Message string `json:"message"`
	} `json:"checks"`
	Rootless  bool     `json:"rootless"`
	Isolation string   `json:"isolation"`
	Refused   []string `json:"refused"`
	Why       string   `json:"why"`
}

func (a *runner) doctor(t *testing.T) doctorReport {
	t.Helper()
	res := a.run("doctor", "--json")
	var rep doctorReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v: %v", err, res)
	}
	return rep
}

func (rep doctorReport) check(name string) (status, message string) {
	for _, c := range rep.Checks {
		if c.Name == name {
			return c.Status, c.Message
		}
	}
	return "", ""
}

// checkDoctor: doctor sees this guest as it is (cgroup v2, Landlock) and
// promises full isolation, which the other checks then get.
func checkDoctor(t *testing.T, a *runner, ref string) {
	rep := a.doctor(t)
	if rep.Isolation != "full" || rep.Rootless != a.u.rootless {
		t.Errorf("doctor: isolation %q, rootless %v: %+v", rep.Isolation, rep.Rootless, rep)
	}
	if st, msg := rep.check("cgroups"); st != "ok" || !strings.HasPrefix(msg, "cgroup v2") {
		t.Errorf("doctor's cgroups check: %s %q", st, msg)
	}
	if st, msg := rep.check("landlock"); st != "ok" {
		t.Errorf("doctor's landlock check: %s %q", st, msg)
	}
}

// TestUndelegatedRootless: the test user started in a cgroup that is not
// delegated to it: doctor says runs are refused for want of cgroups, and
// a run is refused, with no cgroup made and nothing run.
func TestUndelegatedRootless(t *testing.T) {
	requireQEMUGuest(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "vm/busybox:1", imagetest.Image(t, imagetest.BusyboxConfig(),
		imagetest.Layer(t, imagetest.BusyboxFiles(t)...)))
	a := newRunner(t, undelegated)
	a.must("-q", "images", "pull", ref)
	rep := a.doctor(t)
	if rep.Isolation != "refused" || !slices.Contains(rep.Refused, "cgroups") {
		t.Errorf("doctor without delegation: isolation %q, refused %v", rep.Isolation, rep.Refused)
	}
	if st, msg := rep.check("cgroups"); st == "ok" || !strings.HasPrefix(msg, "cgroup v2") {
		t.Errorf("doctor's cgroups check without delegation: %s %q", st, msg)
	}
	res := a.run("run", "--image", ref, "--", "echo", "ran")
	if res.code != 125 || strings.Contains(res.stdout, "ran") || !strings.Contains(res.stderr, "cgroup") {
		t.Errorf("a run without delegation must be refused, saying why: %v", res)
	}
	if left := a.sandboxCgroups(); len(left) != 0 {
		t.Errorf("cgroups made: %v", left)
	}
}
