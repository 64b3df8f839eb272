package native

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestCleanupAfter100Runs: no mounts, cgroups or processes are left after
// 100 runs, a third of them killed mid-way by a timeout and some with
// limits (so with cgroups) and volumes.
func TestCleanupAfter100Runs(t *testing.T) {
	mountsBefore := mountTable(t)
	host := t.TempDir()
	b := New(Options{DataDir: t.TempDir()})
	for i := 0; i < 100; i++ {
		spec := newSpec("true")
		id := "cleanup" + strconv.Itoa(os.Getpid()) + "x" + strconv.Itoa(i)
		switch i % 3 {
		case 1:
			spec = newSpec("sh", "-c", "sleep 10 & sleep 10")
			spec.Resources.Timeout = 20 * time.Millisecond
		case 2:
			spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountCopyOnWrite, Source: host, Dest: "/workspace"}}
		}
		spec.ID = id
		if i%4 == 0 && os.Geteuid() == 0 {
			spec.Resources.MemoryMB, spec.Resources.PIDs = 64, 64
		}
		res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || (i%3 == 1) != res.TimedOut {
			t.Fatalf("run %d: %+v %v", i, res, err)
		}
	}
	if left := waitGone(sandboxProcs, 3*time.Second); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	for _, d := range agentkernelCgroups() {
		if strings.Contains(d, "cleanup"+strconv.Itoa(os.Getpid())+"x") {
			t.Errorf("cgroup left: %s", d)
		}
	}
	if after := mountTable(t); after != mountsBefore {
		t.Errorf("mount table changed:\nbefore:\n%s\nafter:\n%s", mountsBefore, after)
	}
}

func TestKeepAndGC(t *testing.T) {
	data := t.TempDir()
	b := New(Options{DataDir: data})
	spec := newSpec("sh", "-c", "echo kept > /root/file")
	spec.Keep = true
	res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil || res.ExitCode != 0 || res.KeptAt == "" {
		t.Fatalf("%+v %v", res, err)
	}
	if got, err := os.ReadFile(filepath.Join(res.KeptAt, "root/file")); err != nil || string(got) != "kept\n" {
		t.Fatalf("kept upper: %q %v", got, err)
	}
	// A crashed run's directory: lock file nobody holds, no kept marker.
	stale := filepath.Join(data, "runs", "crashed")
	if err := os.MkdirAll(filepath.Join(stale, "upper"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, lockFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A live run's directory: its lock is held.
	live := filepath.Join(data, "runs", "live")
	if err := os.MkdirAll(live, 0o700); err != nil {
		t.Fatal(err)
	}
	lf, err := os.Create(filepath.Join(live, lockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	removed, err := GC(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	// Other runs on this machine may have left stale cgroups, which GC
	// rightly removes too; of our directories only the crashed one goes.
	gotStale := false
	for _, r := range removed {
		gotStale = gotStale || r == stale
		if strings.HasPrefix(r, data) && r != stale {
			t.Errorf("GC removed %s", r)
		}
	}
	if !gotStale {
		t.Errorf("removed %v, want %s among them", removed, stale)
	}
	for _, keep := range []string{res.KeptAt, live} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("GC removed %s", keep)
		}
	}
	// An empty, old agentkernel cgroup (root only).
	if os.Geteuid() == 0 {
		parent := cgroupParents()[0]
		if err := os.MkdirAll(filepath.Join(parent, cgroupPrefix+"gctest"), 0o755); err == nil {
			old := time.Now().Add(-time.Hour)
			_ = os.Chtimes(filepath.Join(parent, cgroupPrefix+"gctest"), old, old)
			removed, _ = GC(context.Background(), "")
			if _, err := os.Stat(filepath.Join(parent, cgroupPrefix+"gctest")); err == nil {
				_ = unix.Rmdir(filepath.Join(parent, cgroupPrefix+"gctest"))
				t.Logf("cgroupfs ignores utimes; empty-cgroup GC not checked (removed %v)", removed)
			}
		}
	}
}

// TestRootless runs sandboxes as an unprivileged user created for the
// test: same isolation, caller mapped to root; without a delegated
// cgroup, no cgroup limits (allowed by allow_degraded, with one warning).
func TestRootless(t *testing.T) {
	requireRoot(t)
	const name = "aktestuser"
	if _, err := osuser.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/bin/false", name).CombinedOutput(); err != nil {
			testenv.Missing(t, "cannot create the test user %s: %v %s", name, err, out)
		}
	}
	u, err := osuser.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	// A world-readable copy of the test binary and an image owned by the
	// user, in a directory the user can reach.
	dir, err := os.MkdirTemp("", "ak-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, _ := os.ReadFile("/proc/self/exe")
	bin := filepath.Join(dir, "native.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "rootfs")
	if err := buildBusybox(img, 0); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", u.Uid+":"+u.Gid, img).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(work, atoi(u.Uid), atoi(u.Gid))

	// allow is [security] allow_degraded for the runs below: "cgroups"
	// where no cgroup is delegated to the user (TestRootlessNoDelegation
	// checks the refusal without it).
	allow := ""
	if p := probeAs(t, u, bin); p.NoCgroups {
		allow = "cgroups"
	}
	run := func(spec *sandbox.Spec) (string, string, int) {
		cmd := helperCmd(t, spec)
		cmd.Env = append(cmd.Env, "AK_ALLOW_DEGRADED="+allow)
		cmd.Path = "/usr/bin/setpriv"
		cmd.Args = []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", bin}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	spec := newSpec("sh", "-c", "id -u; cat /proc/self/uid_map; hostname; echo x > /proc/sys/kernel/core_pattern 2>/dev/null && echo CORE; echo hi > /workspace/f; cat /workspace/f; exit 7")
	spec.Rootfs = image.Rootfs{Layers: []string{img}}
	spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountCopyOnWrite, Source: work, Dest: "/workspace"}}
	spec.Resources.MemoryMB = 64
	out, errs, code := run(spec)
	if code != 7 {
		t.Fatalf("exit %d: %q %q", code, out, errs)
	}
	// Root inside is the user; with a subordinate range delegated to the
	// user (useradd gives one, uidmap's helpers map it), ids 1… are that
	// range.
	f := strings.Fields(out)
	sub, _, subOK := subRange("/etc/subuid", name, atoi(u.Uid))
	wantFields := 6
	if subOK && isExecutable("/usr/bin/newuidmap") && isExecutable("/usr/bin/newgidmap") {
		wantFields = 9
	}
	if len(f) != wantFields || f[0] != "0" || f[1] != "0" || f[2] != u.Uid || f[3] != "1" || f[len(f)-2] != "sbx" || strings.Contains(out, "CORE") || f[len(f)-1] != "hi" {
		t.Fatalf("rootless: %q %q", out, errs)
	}
	if wantFields == 9 && (f[4] != "1" || f[5] != strconv.Itoa(sub) || f[6] != "65535") {
		t.Fatalf("rootless subordinate map: %q", out)
	}
	// With that range, other ids exist inside: chown and su work.
	if wantFields == 9 {
		if out, errs, code := run(newSpecIn(img, "sh", "-c", "touch /tmp/f && chown 1000:1000 /tmp/f && stat -c %u:%g /tmp/f && su app -s /bin/sh -c 'id -u'")); code != 0 || out != "1000:1000\n1000\n" {
			t.Errorf("chown and su with subordinate ids: %d %q %q", code, out, errs)
		}
	}
	if got := strings.Count(errs, "allow_degraded allows"); allow != "" && got != 1 {
		t.Errorf("%d warnings of running without cgroup limits, want 1: %q", got, errs)
	}
	if _, err := os.Stat(filepath.Join(work, "f")); err == nil {
		t.Error("cow write reached the host")
	}
	// PID 1 (the re-executed init, root of the sandbox's user namespace
	// while it builds) holds nothing once the command runs.
	if out, errs, code := run(newSpecIn(img, "sh", "-c", pid1Status)); code != 0 {
		t.Errorf("PID 1 status: %d %q %q", code, out, errs)
	} else {
		checkPID1(t, "rootless", out)
	}
	// Exit codes and exec errors as rootless.
	if _, errs, code := run(newSpecIn(img, "no-such-cmd")); code != 125 || !strings.Contains(errs, "not found") {
		t.Errorf("not found: %d %q", code, errs)
	}
	hostSpec := newSpec("sh", "-c", "test -x /usr/bin/env && echo HOST")
	hostSpec.Rootfs = imageHost()
	if out, errs, code := run(hostSpec); code != 0 || out != "HOST\n" {
		t.Errorf("host image rootless: %d %q %q", code, out, errs)
	}
}

func newSpecIn(img string, args ...string) *sandbox.Spec {
	s := newSpec(args...)
	s.Rootfs = image.Rootfs{Layers: []string{img}}
	return s
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestConcurrentRuns: sandboxes started in parallel do not disturb each
// other (8 at a time, on the stub and the Go exec stage).
func TestConcurrentRuns(t *testing.T) {
	for _, goExec := range []bool{false, true} {
		b := New(Options{DataDir: t.TempDir()})
		b.goExecStage = goExec
		errs := make(chan error, 48)
		for w := 0; w < 8; w++ {
			go func() {
				for i := 0; i < 6; i++ {
					spec := newSpec("sh", "-c", "exit 3")
					res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
					if err == nil && res.ExitCode != 3 {
						err = fmt.Errorf("exit %d", res.ExitCode)
					}
					errs <- err
				}
			}()
		}
		for i := 0; i < 48; i++ {
			if err := <-errs; err != nil {
				t.Errorf("go exec stage %v: %v", goExec, err)
			}
		}
	}
}

// TestGCOnlyItsDataDir: a run killed with its agentkernel leaves its
// cgroup behind; GC of another data directory leaves it alone, GC of the
// run's own removes it.
func TestGCOnlyItsDataDir(t *testing.T) {
	requireRoot(t)
	dataA, dataB := t.TempDir(), t.TempDir()
	spec := newSpec("sh", "-c", "echo ready; sleep 30")
	spec.ID = "gcowner" + strconv.Itoa(os.Getpid())
	spec.Resources.PIDs = 50
	cmd := helperCmd(t, spec)
	cmd.Env = append(cmd.Env, "AK_DATA_DIR="+dataA)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("%q %v", buf, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var left []string
	for _, d := range agentkernelCgroups() {
		if strings.HasSuffix(d, spec.ID) {
			left = append(left, d)
		}
	}
	if len(left) == 0 {
		t.Fatal("the killed run left no cgroup: nothing to test")
	}
	t.Cleanup(func() {
		for _, d := range left {
			_ = removeCgroupDir(d)
		}
	})
	// Empty (the sandbox died with its parent), and past GC's grace
	// period for cgroups still being joined.
	old := time.Now().Add(-time.Hour)
	for _, d := range left {
		if procs := waitGone(func() []string {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			return strings.Fields(string(b))
		}, 3*time.Second); len(procs) > 0 {
			t.Fatalf("%s: still holds %v", d, procs)
		}
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := GC(context.Background(), dataB)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range left {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("GC of another data directory removed %s (%v; removed %v)", d, err, removed)
		}
	}
	removed, err = GC(context.Background(), dataA)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range left {
		if _, err := os.Stat(d); err == nil || !slices.Contains(removed, d) {
			t.Errorf("GC of its own data directory left %s (removed %v)", d, removed)
		}
	}
}

// TestCgroupOwner: a cgroup name says which data directory's GC may
// remove it.
func TestCgroupOwner(t *testing.T) {
	a, b := dataDirTag("/srv/a"), dataDirTag("/srv/b")
	if a == "" || a == b || a != dataDirTag("/srv/x/../a/") || dataDirTag("") != "" {
		t.Fatalf("tags: %q %q", a, b)
	}
	for _, c := range []struct {
		name, owner string
		want        bool
	}{
		{cgroupName("0123abcd", a), a, true},
		{cgroupName("0123abcd", a), b, false},
		{cgroupName("0123abcd", a), "", false},
		{cgroupName("0123abcd", ""), "", true},
		{cgroupName("0123abcd", ""), a, false},
		{cgroupName("gctest", ""), "", true},
		{"agentkernel", "", false},
		{"other-" + a + "-0123abcd", a, false},
	} {
		if got := ownedBy(c.name, c.owner); got != c.want {
			t.Errorf("ownedBy(%q, %q) = %v", c.name, c.owner, got)
		}
	}
}
