package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestMakeRunCgroups: the cgroups of a run's limits are made below the
// process's own in the hierarchies of those limits only, with their
// values; where runsc should make them, nothing is made. The hierarchies
// are directories of a temporary root (mkdir and writes as on cgroupfs;
// the moves are TestRunOwnCgroups's).
func TestMakeRunCgroups(t *testing.T) {
	self := "12:pids:/user.slice\n6:memory:/m/n\n4:cpu,cpuacct:/c\n3:name=systemd:/s\n0::/u\n"
	root := t.TempDir()
	for _, d := range []string{"pids/user.slice", "memory/m/n", "cpu,cpuacct/c"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res := sandbox.Resources{MemoryMB: 512, PIDs: 256, CPUPercent: 50}
	cg, err := makeRunCgroups(root, self, false, "agentkernel-gvisor-x", res)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{root + "/memory/m/n/agentkernel-gvisor-x", root + "/pids/user.slice/agentkernel-gvisor-x", root + "/cpu,cpuacct/c/agentkernel-gvisor-x"}
	if strings.Join(cg.dirs, " ") != strings.Join(want, " ") || cg.cpu != want[2] {
		t.Fatalf("dirs %q cpu %q, want %q", cg.dirs, cg.cpu, want)
	}
	if strings.Join(cg.own, " ") != root+"/memory/m/n "+root+"/pids/user.slice "+root+"/cpu,cpuacct/c" {
		t.Fatalf("own %q", cg.own)
	}
	for file, v := range map[string]string{want[0] + "/memory.limit_in_bytes": "536870912", want[1] + "/pids.max": "256"} {
		if b, err := os.ReadFile(file); err != nil || string(b) != v {
			t.Errorf("%s: %q %v, want %q", file, b, err, v)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "s")); err == nil {
		t.Error("a cgroup made in a hierarchy without a limit")
	}
	// The CPU quota, where no hook could be made.
	if err := cg.setCPUQuota(50000, 100000); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(want[2] + "/cpu.cfs_quota_us"); string(b) != "50000" {
		t.Errorf("cpu.cfs_quota_us %q", b)
	}
	// The quota hook writes where the cpu cgroup was made.
	dir, _, err := quotaFiles(self, false, "agentkernel-gvisor-x", 1, 1)
	if err != nil || strings.Replace(dir, "/sys/fs/cgroup", root, 1) != cg.cpu {
		t.Errorf("the quota hook writes into %s (%v), the cgroup is %s", dir, err, cg.cpu)
	}
	for _, f := range []string{"memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us", "cpu.cfs_period_us"} {
		for _, d := range cg.dirs {
			os.Remove(filepath.Join(d, f))
		}
	}
	if cg.remove() {
		t.Fatal("remove left a cgroup")
	}
	for _, d := range want {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s not removed", d)
		}
	}

	// What GC reads back: only this run's directories below
	// /sys/fs/cgroup.
	runDir := t.TempDir()
	name := "agentkernel-gvisor-agentkernel-1"
	rec := []string{"/sys/fs/cgroup/pids/" + name, "/sys/fs/cgroup/memory/a/" + name}
	hostile := []string{"", "/etc", "/sys/fs/cgroup/pids/other", "/sys/fs/cgroup/pids/../../../etc/" + name, "sys/fs/cgroup/pids/" + name, "/sys/fs/cgroupx/" + name, "/sys/fs/cgroup//pids/" + name}
	if err := os.WriteFile(filepath.Join(runDir, cgroupsFile), []byte(strings.Join(append(hostile, rec...), "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := recordedCgroups(runDir, name); strings.Join(got, " ") != strings.Join(rec, " ") {
		t.Errorf("recordedCgroups: %q, want %q", got, rec)
	}
	if err := (&runCgroups{dirs: rec}).record(runDir); err != nil {
		t.Fatal(err)
	}
	if got := recordedCgroups(runDir, name); strings.Join(got, " ") != strings.Join(rec, " ") {
		t.Errorf("record then recordedCgroups: %q, want %q", got, rec)
	}

	// One limit, one hierarchy.
	cg, err = makeRunCgroups(root, self, false, "only-pids", sandbox.Resources{PIDs: 5})
	if err != nil || len(cg.dirs) != 1 || cg.dirs[0] != root+"/pids/user.slice/only-pids" || cg.cpu != "" {
		t.Fatalf("pids only: %+v %v", cg, err)
	}
	os.Remove(cg.dirs[0] + "/pids.max")
	cg.remove()

	// Left to runsc: no limits, a pure v2 host, a controller without a
	// v1 hierarchy, a hostile name or path. Nothing is made.
	for _, c := range []struct {
		self, name string
		v2         bool
		res        sandbox.Resources
	}{
		{self, "n", false, sandbox.Resources{}},
		{self, "n", true, res},
		{"12:pids:/p\n0::/u\n", "n", false, res},
		{"6:memory:/../../etc\n", "n", false, sandbox.Resources{MemoryMB: 1}},
		{self, "../n", false, res},
		{self, "", false, res},
	} {
		if cg, err := makeRunCgroups(root, c.self, c.v2, c.name, c.res); !errors.Is(err, errNoOwnCgroups) {
			t.Errorf("%q %q v2=%v %+v: %+v %v, want errNoOwnCgroups", c.self, c.name, c.v2, c.res, cg, err)
		}
	}
	// A failure half-way removes what was made.
	if err := os.WriteFile(filepath.Join(root, "cpu,cpuacct/c/half"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := makeRunCgroups(root, self, false, "half", res); err == nil || errors.Is(err, errNoOwnCgroups) {
		t.Fatalf("want a failure making the cpu cgroup, got %v", err)
	}
	for _, d := range []string{"memory/m/n/half", "pids/user.slice/half"} {
		if _, err := os.Stat(filepath.Join(root, d)); err == nil {
			t.Errorf("%s left after a failure", d)
		}
	}
}

// TestRunOwnCgroups: on a cgroup v1 host, a run's gofer and Sentry (and
// runsc's own process, started with --ignore-cgroups) are in cgroups
// the run made, with the limits, in the hierarchies of those limits
// only; no thread of agentkernel's stays in them once runsc has
// started; they go with the run. The limits holding is the attack
// battery's (fork_bomb, memory_bomb) and TestCPUQuota's.
func TestRunOwnCgroups(t *testing.T) {
	needRunsc(t)
	if isCgroup2Only() {
		t.Skip("a pure cgroup v2 host: runsc makes the cgroups itself (CLONE_INTO_CGROUP)")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if _, ok := v1Dir("/sys/fs/cgroup", string(self), c); !ok {
			t.Skipf("no v1 hierarchy of %s here: runsc makes the cgroups", c)
		}
	}
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer, "sh", "-c", "echo up; sleep 30")
	spec.Resources = sandbox.Resources{CPUPercent: 70, MemoryMB: 300, PIDs: 200}
	cancel, done := startRun(t, b, spec, "up\n")
	runs, _ := filepath.Glob(filepath.Join(dataDir, "gvisor", "agentkernel-*"))
	if len(runs) != 1 {
		t.Fatalf("runs: %q", runs)
	}
	id := filepath.Base(runs[0])
	name := cgroupName(id)

	// runsc's processes: the waiting `runsc run`, the gofer, the Sentry.
	var procs []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(cmd), runs[0]+"/state") {
			procs = append(procs, pid)
			if strings.Contains(string(cmd), "\x00run\x00") && !strings.Contains(string(cmd), "--ignore-cgroups") {
				t.Errorf("runsc run without --ignore-cgroups: %q", cmd)
			}
		}
	}
	if len(procs) < 3 {
		t.Fatalf("found %d of runsc's processes for %s, want 3 or more", len(procs), id)
	}
	for _, pid := range procs {
		cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if err != nil {
			continue // ended meanwhile
		}
		for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			in := strings.HasSuffix(parts[2], "/"+name)
			limited := strings.Contains(","+parts[1]+",", ",memory,") || strings.Contains(","+parts[1]+",", ",pids,") || strings.Contains(","+parts[1]+",", ",cpu,")
			if in != limited {
				t.Errorf("process %d: %s (in the run's cgroup: %v, a limit's hierarchy: %v)", pid, line, in, limited)
			}
		}
	}
	for c, want := range map[string]string{"memory/memory.limit_in_bytes": strconv.Itoa(300 << 20), "pids/pids.max": "200", "cpu/cpu.cfs_quota_us": "70000"} {
		ctrl, file, _ := strings.Cut(c, "/")
		dir, _ := v1Dir("/sys/fs/cgroup", string(self), ctrl)
		if got, err := os.ReadFile(filepath.Join(dir, name, file)); err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("%s/%s/%s: %q %v, want %s", dir, name, file, got, err, want)
		}
	}
	// The thread that started runsc goes back once it has.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var in []string
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			cg, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/cgroup")
			if strings.Contains(string(cg), "/"+name+"\n") {
				in = append(in, task.Name())
			}
		}
		if len(in) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v of this process still in the sandbox's cgroups", in)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if left := leftovers(dataDir); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}
