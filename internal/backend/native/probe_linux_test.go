package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/cgroups"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// probeHelperEnv makes the test binary print what the probes find for
// its user (probeHelperMain) and exit.
const probeHelperEnv = "AK_NATIVE_PROBE_HELPER"

// probeVerdict is what probeHelperMain prints.
type probeVerdict struct {
	NoCgroups bool   `json:"no_cgroups"`
	CgroupErr string `json:"cgroup_err"`
	Layout    string `json:"layout"`
	Userns    string `json:"userns"`
	Overlay   string `json:"overlay"`
	Seccomp   string `json:"seccomp"`
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func probeHelperMain() int {
	cp := ProbeCgroups(os.Getenv("AK_DATA_DIR"))
	u, o := ProbeUserNamespace(context.Background())
	v := probeVerdict{NoCgroups: NoCgroups(cp.Err), CgroupErr: errText(cp.Err), Layout: cp.Layout,
		Userns: errText(u), Overlay: errText(o), Seccomp: errText(ProbeSeccomp(context.Background()))}
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		return 1
	}
	return 0
}

// probeAs runs the probes as user u through the test binary copy bin.
func probeAs(t *testing.T, u *osuser.User, bin string, wrap ...string) probeVerdict {
	t.Helper()
	args := append(wrap, "/usr/bin/setpriv", "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups", bin)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), probeHelperEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probes as %s: %v %s", u.Username, err, out)
	}
	var v probeVerdict
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("probes as %s: %v: %q", u.Username, err, out)
	}
	return v
}

func TestCgroupLayoutOf(t *testing.T) {
	const (
		v1Line   = "30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory\n"
		v2Line   = "31 25 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:12 - cgroup2 cgroup2 rw\n"
		rootLine = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
	)
	for _, c := range []struct{ in, want string }{
		{rootLine + v1Line, "v1"},
		{rootLine + v1Line + v2Line, "hybrid"},
		{rootLine + v2Line, "v2"},
		{rootLine, "none"},
		{"", "none"},
		{"garbage without separator\n" + v1Line, "v1"},
		// A source or mount point named cgroup is not a cgroup mount.
		{"40 1 0:5 / /cgroup rw - tmpfs cgroup rw\n", "none"},
	} {
		if got := cgroupLayoutOf(c.in); got != c.want {
			t.Errorf("cgroupLayoutOf(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// This host's, as runs see it.
	if l := CgroupLayout(); l != "v2" && l != "hybrid" && l != "v1" && l != "none" {
		t.Errorf("CgroupLayout() = %q", l)
	}
}

// TestV1OwnDirIn: a v1 hierarchy mounted from the host's root keeps
// /proc/self/cgroup's path; one mounted from a container's own cgroup (a
// container sharing the host's cgroup namespace, as podman and docker do
// on v1 and hybrid hosts) is that cgroup's root, so the path is taken
// relative to the mount's root. Before, the sandboxes' cgroups were
// made at <container cgroup>/<container cgroup again>/agentkernel.
func TestV1OwnDirIn(t *testing.T) {
	const ctr = "/libpod_parent/libpod-6505ab"
	host := "30 25 0:31 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n" +
		"31 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
	inCtr := "148 141 0:74 / /sys/fs/cgroup rw - tmpfs cgroup rw,size=1024k\n" +
		"155 148 0:31 " + ctr + " /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n" +
		"158 148 0:28 " + ctr + " /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu\n" +
		"159 148 0:29 /a\\040b /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids\n"
	for _, c := range []struct {
		mountinfo, ctl, own, want string
		ok                        bool
	}{
		{host, "memory", "/user.slice/session-1.scope", "/sys/fs/cgroup/memory/user.slice/session-1.scope", true},
		{host, "cpu", "/x", "/sys/fs/cgroup/cpu,cpuacct/x", true},
		{host, "pids", "/x", "", false},
		{inCtr, "memory", ctr, "/sys/fs/cgroup/memory", true},
		{inCtr, "memory", ctr + "/sub", "/sys/fs/cgroup/memory/sub", true},
		{inCtr, "cpu", ctr, "/sys/fs/cgroup/cpu", true},
		// A path outside the mount's root, and a sibling sharing its
		// prefix, are not under it.
		{inCtr, "memory", "/other", "", false},
		{inCtr, "memory", ctr + "x", "", false},
		{inCtr, "pids", "/a b/c", "/sys/fs/cgroup/pids/c", true},
	} {
		got, ok := v1OwnDirIn(c.mountinfo, c.ctl, c.own)
		if got != c.want || ok != c.ok {
			t.Errorf("v1OwnDirIn(%s, %q) = %q %v, want %q %v", c.ctl, c.own, got, ok, c.want, c.ok)
		}
	}
	// This host's own cgroup resolves to a directory that exists.
	if CgroupLayout() != "v2" {
		if own, err := cgroups.ParseCgroupFile("/proc/self/cgroup"); err == nil && own["memory"] != "" {
			if d := v1OwnDir("memory", own["memory"]); !dirExists(d) {
				t.Errorf("v1OwnDir(memory, %q) = %s, which does not exist", own["memory"], d)
			}
		}
	}
}

func dirExists(d string) bool {
	st, err := os.Stat(d)
	return err == nil && st.IsDir()
}

// TestNotWritable: a hierarchy the caller may not write, or one mounted
// read-only (a container's), is the fallback ladder's case.
func TestNotWritable(t *testing.T) {
	for _, err := range []error{
		&os.PathError{Op: "mkdir", Path: "/sys/fs/cgroup/memory/x", Err: syscall.EROFS},
		fmt.Errorf("creating a cgroup: %w", &os.PathError{Op: "mkdir", Path: "/x", Err: syscall.EACCES}),
		syscall.EPERM,
	} {
		if !notWritable(err) {
			t.Errorf("notWritable(%v) = false", err)
		}
	}
	if notWritable(syscall.EBUSY) || notWritable(errors.New("other")) {
		t.Error("notWritable of EBUSY or another error")
	}
}

func TestLadder(t *testing.T) {
	cause := errors.New("no cgroup this user may create: x is not writable")
	w, err := Ladder([]string{config.DegradeCgroups}, config.DegradeCgroups, cause)
	if err != nil || !strings.Contains(w, "allow_degraded allows") || !strings.Contains(w, "x is not writable") {
		t.Errorf("allowed: %q %v", w, err)
	}
	for _, allowed := range [][]string{nil, {config.DegradeLandlock}, {""}, {"Cgroups"}} {
		w, err := Ladder(allowed, config.DegradeCgroups, cause)
		var de *DegradedError
		if w != "" || !errors.As(err, &de) || de.Protection != config.DegradeCgroups || !errors.Is(err, cause) {
			t.Fatalf("allowed %q: %q %v", allowed, w, err)
		}
		for _, want := range []string{`allow_degraded = ["cgroups"]`, "systemd-run --user --scope -p Delegate=yes", "x is not writable", "refusing"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal lacks %q: %v", want, err)
			}
		}
	}
	_, err = Ladder(nil, config.DegradeLandlock, errNoLandlock)
	if err == nil || !strings.Contains(err.Error(), `allow_degraded = ["landlock"]`) || !strings.Contains(err.Error(), "Landlock") {
		t.Errorf("landlock refusal: %v", err)
	}
}

// TestProbesAsRoot: the probes' verdicts for root match what root runs
// do here: a cgroup with limits is made (a run with limits succeeds and
// is held to them), namespaces, overlay and seccomp work.
func TestProbesAsRoot(t *testing.T) {
	requireRoot(t)
	cp := ProbeCgroups(t.TempDir())
	if cp.Err != nil {
		t.Fatalf("cgroups as root: %v", cp.Err)
	}
	if u, o := ProbeUserNamespace(context.Background()); u != nil || o != nil {
		t.Fatalf("user namespace %v, overlay %v", u, o)
	}
	if err := ProbeSeccomp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rootless, err := ProbeIDMapped(t.TempDir()); rootless || err != nil {
		t.Fatalf("idmapped: %v %v", rootless, err)
	}
	// The verdict holds for a run: limits applied, no warning.
	spec := newSpec("sh", "-c", `x=$(head -c 100000000 /dev/zero | tr '\0' a); echo ${#x}`)
	spec.Resources.MemoryMB = 32
	var warns []string
	b := New(Options{DataDir: t.TempDir(), Warn: func(s string) { warns = append(warns, s) }})
	res, err := b.Run(context.Background(), spec, sandbox.Stdio{})
	if err != nil || res.ExitCode != 137 || res.OOMKills == 0 || len(warns) != 0 {
		t.Fatalf("a run past its 32 MiB limit: %+v %v, warnings %q", res, err, warns)
	}
	// Nothing of the probe's cgroup is left.
	for _, d := range agentkernelCgroups() {
		if strings.Contains(d, "doctor") {
			t.Errorf("probe cgroup left: %s", d)
		}
	}
}

// TestRootlessNoDelegation: a rootless run with limits and no cgroup
// delegated to its user is refused (exit 125, the message naming
// allow_degraded and the systemd-run fix) and runs nothing; with
// allow_degraded it runs without limits after one warning; a run without
// limits needs no cgroup. With a subtree delegated (chowned to the user
// and the helper moved into it), the probe says so and the same run is
// held to its limit. Each time the probe's verdict is what the run did.
func TestRootlessNoDelegation(t *testing.T) {
	requireRoot(t)
	u, bin := rootlessTestBinary(t)
	run := func(spec *sandbox.Spec, allow string, wrap ...string) (string, string, int) {
		t.Helper()
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		args := append(wrap, "/usr/bin/setpriv", "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups", bin)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), helperEnv+"="+string(b), "AK_ALLOW_DEGRADED="+allow)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	hostSpec := func(mem int64, args ...string) *sandbox.Spec {
		s := newSpec(args...)
		s.Rootfs = imageHost()
		s.Resources.MemoryMB = mem
		return s
	}

	v := probeAs(t, u, bin)
	if v.Userns != "" || v.Overlay != "" || v.Seccomp != "" {
		t.Fatalf("rootless probes: %+v", v)
	}
	if !v.NoCgroups {
		t.Logf("a cgroup is delegated to %s on this host (%s): the refusal is not checked", u.Username, v.CgroupErr)
	} else {
		out, errs, code := run(hostSpec(64, "echo", "RAN"), "")
		if code != 125 || strings.Contains(out, "RAN") {
			t.Errorf("not delegated, not allowed: exit %d, stdout %q: want 125 and nothing run", code, out)
		}
		for _, want := range []string{"refusing to run without cgroup limits", `allow_degraded = ["cgroups"]`, "systemd-run --user --scope -p Delegate=yes"} {
			if !strings.Contains(errs, want) {
				t.Errorf("refusal lacks %q: %q", want, errs)
			}
		}
		out, errs, code = run(hostSpec(64, "echo", "RAN"), "landlock,cgroups")
		if code != 0 || out != "RAN\n" || strings.Count(errs, "warning:") != 1 || !strings.Contains(errs, "allow_degraded allows") {
			t.Errorf("allowed: exit %d %q %q", code, out, errs)
		}
		if out, errs, code := run(hostSpec(0, "echo", "RAN"), ""); code != 0 || out != "RAN\n" || errs != "" {
			t.Errorf("no limits asked: exit %d %q %q", code, out, errs)
		}
	}

	// A delegated subtree: the probe and the run agree the other way.
	wrap, ok := delegateCgroup(t, u)
	if !ok {
		return
	}
	dv := probeAs(t, u, bin, wrap...)
	if dv.NoCgroups || dv.CgroupErr != "" {
		t.Fatalf("delegated: the probe says %q", dv.CgroupErr)
	}
	out, errs, code := run(hostSpec(32, "sh", "-c", `x=$(head -c 100000000 /dev/zero | tr '\0' a); echo ${#x}`), "", wrap...)
	if code != 137 || strings.Contains(errs, "warning:") {
		t.Errorf("delegated, past a 32 MiB limit: exit %d %q %q, want 137 without warnings", code, out, errs)
	}
}

// rootlessTestBinary creates the test user and a copy of the test binary
// it may run.
func rootlessTestBinary(t *testing.T) (*osuser.User, string) {
	t.Helper()
	const name = "aktestuser"
	if _, err := osuser.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/bin/false", name).CombinedOutput(); err != nil {
			testenv.Missing(t, "cannot create the test user %s: %v %s", name, err, out)
		}
	}
	if _, err := os.Stat("/usr/bin/setpriv"); err != nil {
		testenv.Missing(t, "no /usr/bin/setpriv (util-linux)")
	}
	u, err := osuser.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ak-nodeleg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "native.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	return u, bin
}

// delegateCgroup makes a cgroup subtree owned by u (v1: one per memory,
// pids and cpu controller below this process's own; v2: a directory with
// the controllers enabled and a leaf the process joins) and returns the
// wrapper that moves the process started through it into the subtree
// before it drops to u.
func delegateCgroup(t *testing.T, u *osuser.User) ([]string, bool) {
	t.Helper()
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	name := "akdeleg" + randomID()
	var dirs, joins []string
	chownAll := func(d string) {
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"cgroup.procs", "tasks", "cgroup.subtree_control", "cgroup.threads"} {
			_ = os.Chown(filepath.Join(d, f), uid, gid)
		}
	}
	if CgroupLayout() == "v2" {
		d := filepath.Join(cgroupRoot, own[""], "..", name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Logf("cannot make a v2 cgroup to delegate: %v", err)
			return nil, false
		}
		dirs = append(dirs, d)
		_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
		leaf := filepath.Join(d, "leaf")
		if err := os.Mkdir(leaf, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, leaf)
		chownAll(d)
		chownAll(leaf)
		joins = append(joins, leaf)
	} else {
		for _, c := range v1Controllers {
			if _, err := os.Stat(filepath.Join(cgroupRoot, c, "cgroup.procs")); err != nil {
				continue
			}
			d := filepath.Join(cgroupRoot, c, own[c], name)
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Logf("cannot make a v1 %s cgroup to delegate: %v", c, err)
				return nil, false
			}
			dirs = append(dirs, d)
			chownAll(d)
			joins = append(joins, d)
		}
	}
	t.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			sub, _ := filepath.Glob(filepath.Join(dirs[i], "agentkernel*"))
			for _, s := range sub {
				inner, _ := filepath.Glob(filepath.Join(s, "agentkernel-*"))
				for _, in := range inner {
					_ = removeCgroupDir(in)
				}
				_ = removeCgroupDir(s)
			}
			_ = removeCgroupDir(dirs[i])
		}
	})
	script := ""
	for _, j := range joins {
		script += fmt.Sprintf("echo $$ > %s/cgroup.procs && ", j)
	}
	return []string{"/bin/sh", "-c", script + `exec "$@"`, "sh"}, true
}
