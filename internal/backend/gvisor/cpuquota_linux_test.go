package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func TestQuotaFiles(t *testing.T) {
	v1 := "12:pids:/a\n4:cpu,cpuacct:/user.slice/x\n3:memory:/m\n0::/u\n"
	dir, files, err := quotaFiles(v1, false, "agentkernel-gvisor-1", 50000, 100000)
	if err != nil || dir != "/sys/fs/cgroup/cpu,cpuacct/user.slice/x/agentkernel-gvisor-1" ||
		len(files) != 2 || files[0] != [2]string{"cpu.cfs_period_us", "100000"} || files[1] != [2]string{"cpu.cfs_quota_us", "50000"} {
		t.Errorf("v1: %q %q %v", dir, files, err)
	}
	// runsc makes a relative cgroup beside its own on a pure v2 host.
	dir, files, err = quotaFiles("0::/system.slice/ak.service\n", true, "agentkernel-gvisor-1", 25000, 100000)
	if err != nil || dir != "/sys/fs/cgroup/system.slice/agentkernel-gvisor-1" || len(files) != 1 || files[0] != [2]string{"cpu.max", "25000 100000"} {
		t.Errorf("v2: %q %q %v", dir, files, err)
	}
	if dir, _, err = quotaFiles("0::/\n", true, "n", 1000, 100000); err != nil || dir != "/sys/fs/cgroup/n" {
		t.Errorf("v2 at the root: %q %v", dir, err)
	}
	for _, c := range []struct {
		cg   string
		v2   bool
		name string
	}{
		{v1, false, "/abs"},
		{v1, false, "../escape"},
		{v1, false, ""},
		{"3:memory:/m\n", false, "n"},     // no cpu controller
		{"0::/u\n", false, "n"},           // v1 asked, only v2 listed
		{"4:cpu,cpuacct:/x\n", true, "n"}, // v2 asked, only v1 listed
	} {
		if _, _, err := quotaFiles(c.cg, c.v2, c.name, 1000, 100000); err == nil {
			t.Errorf("%q %v %q: no error", c.cg, c.v2, c.name)
		}
	}
}

// cpuCgroupDir is the sandbox cgroup's directory in the cpu controller
// (where the quota is).
func cpuCgroupDir(t *testing.T, id string) string {
	t.Helper()
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	dir, _, err := quotaFiles(string(cg), isCgroup2Only(), cgroupName(id), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func readQuota(dir string) (string, error) {
	if b, err := os.ReadFile(dir + "/cpu.max"); err == nil {
		q, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		return q, nil
	}
	b, err := os.ReadFile(dir + "/cpu.cfs_quota_us")
	return strings.TrimSpace(string(b)), err
}

// throttled reads the number of periods in which the cgroup's quota
// stopped it.
func throttled(dir string) int {
	b, _ := os.ReadFile(dir + "/cpu.stat")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, _ := strings.Cut(line, " "); k == "nr_throttled" {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// TestCPUQuota: a sandbox with --cpu runs under its quota: the sandbox's
// cgroup holds it while the command runs, a busy loop is throttled by
// it, and nothing is left behind.
func TestCPUQuota(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer, "sh", "-c", "echo up; while :; do :; done")
	spec.Resources = sandbox.Resources{CPUPercent: 20, MemoryMB: 256}
	cancel, done := startRun(t, b, spec, "up\n")
	runs, _ := filepath.Glob(filepath.Join(dataDir, "gvisor", "agentkernel-*"))
	if len(runs) != 1 {
		t.Fatalf("runs: %q", runs)
	}
	dir := cpuCgroupDir(t, filepath.Base(runs[0]))
	if q, err := readQuota(dir); err != nil || q != "20000" {
		t.Fatalf("the sandbox's cgroup %s has quota %q (%v), want 20000", dir, q, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for throttled(dir) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a busy loop under a 20%% quota was never throttled (%s/cpu.stat)", dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := (<-done).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if left := leftovers(dataDir); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// TestCPUQuotaHookFailsClosed: when the hook cannot write the quota,
// runsc never starts the command. The bundle is the backend's own, its
// hook pointed at a cgroup that does not exist; the command would write
// a file into a volume of the host's.
func TestCPUQuotaHookFailsClosed(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	vol := t.TempDir()
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer, "sh", "-c", "echo ran > /vol/ran")
	spec.Resources = sandbox.Resources{CPUPercent: 50}
	spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountBind, Source: vol, Dest: "/vol"}}
	runsc, _ := findRunsc()
	r := &run{b: b, spec: spec, runsc: runsc, id: "agentkernel-hooktest"}
	r.dir = filepath.Join(dataDir, "gvisor", r.id)
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer r.cleanup()
	type outcome struct {
		out []byte
		err error
		// runsc: err is runsc's (else the test's own set-up failed)
		runsc bool
	}
	res := make(chan outcome, 1)
	goLocked(func() {
		if err := r.prepare(nil); err != nil {
			res <- outcome{nil, err, false}
			return
		}
		// The bundle as made runs the command.
		out, err := exec.Command(runsc, "--root", r.state(), "--network=none", "run", "--bundle", r.bundle(), r.id+"-ok").CombinedOutput()
		res <- outcome{out, err, true}
		cfg := r.bundle() + "/config.json"
		var s specs.Spec
		b, err := os.ReadFile(cfg)
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		if err != nil {
			res <- outcome{nil, err, false}
			return
		}
		if s.Hooks == nil || len(s.Hooks.CreateRuntime) != 1 || s.Linux.Resources.CPU != nil {
			res <- outcome{nil, errors.New("config.json has no quota hook, or still a quota of its own"), false}
			return
		}
		h := &s.Hooks.CreateRuntime[0]
		h.Args[4] = "/sys/fs/cgroup/agentkernel-test-no-such-cgroup"
		if b, err = json.Marshal(&s); err == nil {
			err = os.WriteFile(cfg, b, 0o600)
		}
		if err != nil {
			res <- outcome{nil, err, false}
			return
		}
		out, err = exec.Command(runsc, "--root", r.state(), "--network=none", "run", "--bundle", r.bundle(), r.id+"-bad").CombinedOutput()
		res <- outcome{out, err, true}
	})
	o := <-res
	if !o.runsc {
		t.Fatal(o.err)
	}
	if o.err != nil {
		t.Fatalf("runsc run of the bundle as made: %v: %s", o.err, o.out)
	}
	if err := os.Remove(filepath.Join(vol, "ran")); err != nil {
		t.Fatalf("the bundle as made did not run its command: %v", err)
	}
	o = <-res
	if !o.runsc {
		t.Fatal(o.err)
	}
	if o.err == nil {
		t.Fatalf("runsc ran with a failing quota hook: %s", o.out)
	}
	if !strings.Contains(string(o.out), "hook") {
		t.Logf("runsc: %v: %s", o.err, o.out)
	}
	if _, err := os.Stat(filepath.Join(vol, "ran")); err == nil {
		t.Fatal("the command ran although its quota could not be set")
	}
}
