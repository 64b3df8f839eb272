//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestSandboxPID1IsIdleStub: a running sandbox's PID 1 is the stub,
// idle, holding nothing (no capability in any set, no_new_privs, a
// seccomp filter), a few KiB resident, both as the host and as the
// sandbox see it; the supervisor serves clients from outside the
// sandbox. When PID 1 dies on its own the supervisor records why,
// removes the socket and the cgroup, and ends.
func TestSandboxPID1IsIdleStub(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("persistent sandboxes need the exec stub (amd64)")
	}
	const name = "idle"
	a := newAK(t)
	a.must("sandbox", "create", name, "--image", "host", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", name) })
	sup, ini, err := sandboxPids(a.dataDir, name)
	if err != nil {
		t.Fatal(err)
	}
	if cmd := strings.TrimRight(string(settledCmdline(ini)), "\x00"); cmd != "agentkernel:init" {
		t.Fatalf("PID 1 cmdline %q, want the stub", cmd)
	}
	if m, err := readMem(ini); err != nil || m.rss > 1024 {
		t.Errorf("PID 1 RSS %d kB (%v)", m.rss, err)
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(ini) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	checkHoldsNothing(t, "PID 1 seen from the host", string(st))
	r := a.must("exec", name, "--", "cat", "/proc/1/status")
	checkHoldsNothing(t, "PID 1 seen from inside", r.stdout)
	if r := a.run("exec", name, "--", "sh", "-c", "echo ok; exit 7"); r.stdout != "ok\n" || r.code != 7 {
		t.Errorf("exec: %v", r)
	}
	// An argv over what the exec stub carries is refused as execve would refuse it (126),
	// and the sandbox goes on serving.
	big := []string{"exec", name, "--", "true"}
	for i := 0; i < 8; i++ {
		big = append(big, strings.Repeat("x", 120<<10))
	}
	if r := a.run(big...); r.code != 126 || !strings.Contains(r.stderr, "argument list too long") {
		t.Errorf("exec of a 960 KiB argv: %v", r)
	}
	if r := a.run("exec", name, "--", "true"); r.code != 0 {
		t.Errorf("exec after a refused one: %v", r)
	}
	// Nothing else of agentkernel lives in the sandbox's PID namespace:
	// PID 1 and the shell (read and echo are built in).
	if r := a.must("exec", name, "--", "sh", "-c", "for p in /proc/[0-9]*; do read c < $p/comm; echo $c; done"); r.stdout != "agentkernel-ini\nsh\n" {
		t.Errorf("processes in a fresh sandbox: %q", r.stdout)
	}
	// PID 1 dies on its own: recorded, cleaned up, supervisor gone.
	if err := syscall.Kill(ini, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(sup, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if syscall.Kill(sup, 0) == nil {
		if st, _ := os.ReadFile("/proc/" + strconv.Itoa(sup) + "/stat"); !strings.Contains(string(st), ") Z ") {
			t.Fatalf("supervisor %d still runs after PID 1 died", sup)
		}
	}
	i := a.info(name)
	if i.Status != "stopped" || !strings.Contains(i.StopReason, "killed by signal 9") {
		t.Errorf("after PID 1 was killed: %+v", i)
	}
	dir := filepath.Join(a.dataDir, "sandboxes", name)
	if _, err := os.Stat(filepath.Join(dir, "sock")); err == nil {
		t.Errorf("socket left behind")
	}
	if data, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(data), a.dataDir) {
		t.Errorf("mount left under %s", a.dataDir)
	}
	// It starts again, and a stop is the user's, not a crash.
	a.must("sandbox", "start", name)
	a.must("sandbox", "stop", name)
	if i := a.info(name); i.Status != "stopped" || i.StopReason != "stopped by user" {
		t.Errorf("after stop: %+v", i)
	}
}

// checkHoldsNothing fails t unless the /proc/<pid>/status text says
// the process has no capability in any set, no_new_privs and a seccomp
// filter.
func checkHoldsNothing(t *testing.T, who, status string) {
	t.Helper()
	seen := 0
	for _, l := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		want := ""
		switch k {
		case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb":
			want = "0000000000000000"
		case "NoNewPrivs":
			want = "1"
		case "Seccomp":
			want = "2"
		default:
			continue
		}
		seen++
		if v != want {
			t.Errorf("%s: %s is %s, want %s", who, k, v, want)
		}
	}
	if seen != 7 {
		t.Errorf("%s: status lacks capability, no_new_privs or seccomp lines:\n%s", who, status)
	}
}

// rootlessAK returns an ak that runs agentkernel as an unprivileged user
// the test creates (setpriv), with a world-readable copy of the binary
// and data, home and working directories of the user's; uid is the
// user's. Where that cannot be arranged a prerequisite is missing
// (internal/testenv).
func rootlessAK(t *testing.T) (a *ak, uid int) {
	t.Helper()
	testenv.RequireRoot(t) // it creates a user
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "no setpriv (util-linux)")
	}
	const name = "aktestuser"
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/bin/false", name).CombinedOutput(); err != nil {
			testenv.Missing(t, "cannot create the test user %s: %v %s", name, err, out)
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	top, err := os.MkdirTemp("", "ak-rootless-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(top, 0o755))
	for _, name := range []string{"agentkernel", "agentkernel-full"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(binary), name))
		must(err)
		must(os.WriteFile(filepath.Join(top, name), b, 0o755))
	}
	bin := filepath.Join(top, "agentkernel")
	a = &ak{t: t, bin: bin, wrap: []string{setpriv, "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups"}}
	for _, d := range []*string{&a.dataDir, &a.home, &a.dir} {
		p, err := os.MkdirTemp(top, "d")
		must(err)
		must(os.Chown(p, uid, gid))
		*d = p
	}
	// Where the host delegates no cgroup to the user, runs with limits
	// are refused unless the user's config allows them to go without
	// (TestDoctorVerdicts checks both ways).
	if d := a.doctor(); d.status("cgroups") == "error" {
		allowDegradedCgroups(t, a)
	}
	return a, uid
}

// TestRootlessPersistentSandbox runs the persistent sandbox life as an
// unprivileged user the test creates: the supervisor becomes the stub
// as that user, exec, cp, stats, stop, start and remove work, and
// nothing of the sandbox is left running.
func TestRootlessPersistentSandbox(t *testing.T) {
	a, uid := rootlessAK(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	a.must("sandbox", "create", "rl", "--image", "host", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "rl") })
	sup, ini, err := sandboxPids(a.dataDir, "rl")
	must(err)
	for _, pid := range []int{sup, ini} {
		st, err := os.Stat("/proc/" + strconv.Itoa(pid))
		must(err)
		if owner := st.Sys().(*syscall.Stat_t).Uid; int(owner) != uid {
			t.Errorf("pid %d runs as uid %d, not the user's %d", pid, owner, uid)
		}
	}
	if cmd := strings.TrimRight(string(settledCmdline(ini)), "\x00"); cmd != "agentkernel:init" {
		t.Errorf("PID 1 is %q, not the stub", cmd)
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(ini) + "/status"); err != nil {
		t.Error(err)
	} else {
		checkHoldsNothing(t, "rootless PID 1", string(st))
	}
	// An exec stage is armed for the next command, rootless too.
	armed := waitArmed(t, a.dataDir, "rl")
	if r := a.run("exec", "rl", "--", "sh", "-c", "id -u; echo data > /tmp/f; exit 4"); r.code != 4 || r.stdout != "0\n" {
		t.Errorf("exec: %v", r)
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(armed) + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Errorf("the armed exec stage %d did not start the command", armed)
	}
	out := filepath.Join(a.dir, "f")
	a.must("cp", "rl:/tmp/f", out)
	if b, err := os.ReadFile(out); err != nil || string(b) != "data\n" {
		t.Errorf("cp: %q %v", b, err)
	}
	if r := a.must("stats", "rl"); !strings.Contains(r.stdout, "running") {
		t.Errorf("stats: %v", r)
	}
	a.must("sandbox", "stop", "rl")
	if running(sup) || running(ini) {
		t.Errorf("supervisor or init still running after stop")
	}
	a.must("sandbox", "start", "rl")
	if r := a.must("exec", "rl", "--", "echo", "again"); r.stdout != "again\n" {
		t.Errorf("exec after restart: %v", r)
	}
	sup2, ini2, err := sandboxPids(a.dataDir, "rl")
	must(err)
	a.must("sandbox", "rm", "--force", "rl")
	deadline := time.Now().Add(5 * time.Second)
	for (running(sup2) || running(ini2)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if running(sup2) || running(ini2) {
		t.Errorf("processes left after rm: %d %d", sup2, ini2)
	}
}

// TestRootlessDaemon: the daemon as an unprivileged user serves that
// user's runs with the same output and exit codes as direct runs, and
// stops leaving nothing of the user's running.
func TestRootlessDaemon(t *testing.T) {
	a, uid := rootlessAK(t)
	if r := a.run("daemon", "start"); r.code != 0 {
		t.Fatalf("start: %v", r)
	}
	t.Cleanup(func() { a.run("daemon", "stop") })
	for _, args := range [][]string{
		{"sh", "-c", "echo out; echo err >&2; exit 42"},
		{"sh", "-c", "id -u; pwd"},
		{"no-such-command"},
	} {
		direct := a.run(append([]string{"run", "--no-daemon", "--image", "host"}, args...)...)
		for i := 0; i < 2; i++ {
			got := a.run(append([]string{"run", "--image", "host"}, args...)...)
			if got.stdout != direct.stdout || got.stderr != direct.stderr || got.code != direct.code {
				t.Errorf("%q (daemon run %d):\n daemon: %d %q %q\n direct: %d %q %q", args, i, got.code, got.stdout, got.stderr, direct.code, direct.stdout, direct.stderr)
			}
		}
	}
	r := a.must("daemon", "status", "--json")
	if !strings.Contains(r.stdout, `"hit"`) || strings.Contains(r.stdout, `"hit": 0`) {
		t.Errorf("no run was served from the pool: %s", r.stdout)
	}
	// What this test started: the daemon (its binary copy), everything
	// below it, and the namespaces they live in. Other tests and suites
	// on this machine run as the same user too; their processes are not
	// ours to count.
	mine := ourUserProcs(uid, filepath.Dir(a.bin))
	if len(mine.procs) == 0 {
		t.Errorf("no process of the daemon found before daemon stop")
	}
	a.must("daemon", "stop")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(mine.alive(uid, filepath.Dir(a.bin))) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if left := mine.alive(uid, filepath.Dir(a.bin)); len(left) > 0 {
		t.Errorf("processes the daemon started left after daemon stop: %v", left)
	}
}

// userProc is one process of a user: its pid, start time (pids are
// reused, a pid and its start time are not) and namespaces.
type userProc struct {
	pid, ppid     int
	start         string
	cmd, exe      string
	pidNS, userNS string
}

// userProcs lists the live processes of uid.
func userProcs(uid int) []userProc {
	var out []userProc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !running(pid) {
			continue
		}
		st, err := os.Stat("/proc/" + e.Name())
		if err != nil || int(st.Sys().(*syscall.Stat_t).Uid) != uid {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 20 {
			continue
		}
		p := userProc{pid: pid, start: f[19]}
		p.ppid, _ = strconv.Atoi(f[1])
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		p.cmd = strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")
		p.exe, _ = os.Readlink("/proc/" + e.Name() + "/exe")
		p.pidNS, _ = os.Readlink("/proc/" + e.Name() + "/ns/pid")
		p.userNS, _ = os.Readlink("/proc/" + e.Name() + "/ns/user")
		out = append(out, p)
	}
	return out
}

// ourProcs is a snapshot of the processes a test started as another
// user: those running its binaries, their descendants, and the PID and
// user namespaces they made.
type ourProcs struct {
	procs map[string]bool // pid and start time
	nss   map[string]bool // namespaces other than the host's
}

// ourUserProcs takes the snapshot: uid's processes that run a binary
// under binDir (the test's own copy), and everything below them.
func ourUserProcs(uid int, binDir string) ourProcs {
	all := userProcs(uid)
	host := map[string]bool{}
	for _, ns := range []string{"pid", "user"} {
		l, _ := os.Readlink("/proc/self/ns/" + ns)
		host[l] = true
	}
	o := ourProcs{procs: map[string]bool{}, nss: map[string]bool{}}
	in := map[int]bool{}
	for changed := true; changed; {
		changed = false
		for _, p := range all {
			if in[p.pid] || !(strings.HasPrefix(p.exe, binDir+"/") || in[p.ppid]) {
				continue
			}
			in[p.pid], changed = true, true
			o.procs[fmt.Sprintf("%d@%s", p.pid, p.start)] = true
			for _, ns := range []string{p.pidNS, p.userNS} {
				if ns != "" && !host[ns] {
					o.nss[ns] = true
				}
			}
		}
	}
	return o
}

// alive lists uid's live processes that are in the snapshot, live in one
// of its namespaces, or run a binary under binDir.
func (o ourProcs) alive(uid int, binDir string) []string {
	var out []string
	for _, p := range userProcs(uid) {
		if o.procs[fmt.Sprintf("%d@%s", p.pid, p.start)] || o.nss[p.pidNS] || o.nss[p.userNS] || strings.HasPrefix(p.exe, binDir+"/") {
			out = append(out, fmt.Sprintf("%d: %s", p.pid, p.cmd))
		}
	}
	return out
}

// settledCmdline is pid's command line once it has one. The supervisor
// tells its starter it is ready when it hands its descriptor 3 to the
// waiting stub, just before it execs the stub; until that exec is done
// its command line reads empty, and on a loaded machine a test can look
// in between.
func settledCmdline(pid int) []byte {
	var cmd []byte
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cmd, _ = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); len(cmd) > 0 {
			break
		}
	}
	return cmd
}
