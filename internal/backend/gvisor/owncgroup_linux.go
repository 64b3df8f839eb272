package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A run's cgroups on a cgroup v1 host are made here, not by runsc.
//
// Left to itself, runsc (given a cgroupsPath, or naming one after the
// container when it has none) makes the sandbox's cgroup in every v1
// hierarchy and, since v1 has no CLONE_INTO_CGROUP, moves its own
// process into each before it starts the gofer and the Sentry, and back
// after the boot. Each of those two moves writes cgroup.procs, which
// takes the kernel's cgroup threadgroup lock for writing and so waits
// for an RCU grace period once the lock has been idle a while: 5 to 15
// ms each on an idle 2-vCPU machine, more under load, on every run.
// runsc with --ignore-cgroups ran /bin/true 0.82x as long as runsc
// making its own cgroup (30 runs each, interleaved).
//
// So an ephemeral run (not a persistent sandbox's boot, whose cgroup
// runsc's stats and checkpoints read) on a v1 host makes the cgroups of
// its limits itself, below this process's own in the hierarchies of
// those limits only (memory, pids, cpu), writes the memory and process
// limits, and moves the one thread that starts runsc into them (a
// thread's move through `tasks`, written by another goroutine while the
// thread builds the bundle, so that the grace period overlaps that
// work). runsc, started from that thread with --ignore-cgroups, and its
// gofer and Sentry are then in the cgroups from their first
// instruction; the thread moves back once runsc has started. The CPU
// quota is still written by the createRuntime hook (cpuquota_linux.go)
// into the cpu cgroup made here, which is where the hook looks.
//
// What changes for the sandbox: runsc's waiting `runsc run` process is
// inside the limits too (about 6 threads and a few MiB of its own), and
// gVisor no longer learns the memory limit from the cgroup, so the
// sandbox's /proc/meminfo shows the host's memory, as in -B native's
// and docker's containers; the limit itself holds as before. On a pure
// cgroup v2 host runsc clones straight into its cgroup
// (CLONE_INTO_CGROUP) and is left to do so; so is any host where the
// cgroups cannot be made here.

// runCgroups are the cgroups made for one run.
type runCgroups struct {
	// dirs are the run's cgroup in each hierarchy of its limits, own
	// the directories of this process's cgroup in the same
	// hierarchies, where the thread goes back.
	dirs, own []string
	// cpu is the run's cgroup in the cpu controller's hierarchy, ""
	// without a CPU quota.
	cpu string
}

// v1Limit is one limit's controller and the file of its value.
type v1Limit struct {
	controller, file, value string
}

// v1Limits are the controllers and files of res's limits: the CPU
// quota's controller with no file (the quota hook writes it).
func v1Limits(res sandbox.Resources) []v1Limit {
	var out []v1Limit
	if res.MemoryMB > 0 {
		out = append(out, v1Limit{"memory", "memory.limit_in_bytes", strconv.FormatInt(res.MemoryMB<<20, 10)})
	}
	if res.PIDs > 0 {
		out = append(out, v1Limit{"pids", "pids.max", strconv.FormatInt(res.PIDs, 10)})
	}
	if res.CPUPercent > 0 {
		out = append(out, v1Limit{"cpu", "", ""})
	}
	return out
}

// errNoOwnCgroups says the run's cgroups are left to runsc.
var errNoOwnCgroups = errors.New("cgroups left to runsc")

// makeRunCgroups makes the cgroups named name for res's limits below
// this process's own, in the v1 hierarchies that selfCgroup
// (/proc/self/cgroup) lists, mounted under root (/sys/fs/cgroup). It
// answers errNoOwnCgroups (making nothing) where there is nothing to
// make or runsc should make them: no limits, a pure v2 host, a limit
// whose controller has no v1 hierarchy. What it made is removed when it
// fails half-way.
func makeRunCgroups(root, selfCgroup string, v2only bool, name string, res sandbox.Resources) (*runCgroups, error) {
	limits := v1Limits(res)
	if len(limits) == 0 || v2only {
		return nil, errNoOwnCgroups
	}
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup name %q: %w", name, errNoOwnCgroups)
	}
	cg := &runCgroups{}
	for _, l := range limits {
		own, ok := v1Dir(root, selfCgroup, l.controller)
		if !ok {
			return nil, fmt.Errorf("no v1 hierarchy of %s: %w", l.controller, errNoOwnCgroups)
		}
		if l.controller == "cpu" {
			cg.cpu = filepath.Join(own, name)
		}
		if slices.Contains(cg.own, own) {
			continue // two controllers in one hierarchy
		}
		cg.own = append(cg.own, own)
		cg.dirs = append(cg.dirs, filepath.Join(own, name))
	}
	for i, dir := range cg.dirs {
		if err := os.Mkdir(dir, 0o755); err != nil {
			cg.dirs = cg.dirs[:i]
			cg.remove()
			return nil, fmt.Errorf("making the sandbox's cgroup: %w", err)
		}
	}
	for _, l := range limits {
		if l.file == "" {
			continue
		}
		own, _ := v1Dir(root, selfCgroup, l.controller)
		if err := os.WriteFile(filepath.Join(own, name, l.file), []byte(l.value), 0); err != nil {
			cg.remove()
			return nil, fmt.Errorf("setting the sandbox's %s: %w", l.file, err)
		}
	}
	return cg, nil
}

// v1Dir is this process's cgroup directory in the v1 hierarchy of
// controller, mounted under root at the hierarchy's controller list
// (as removeCgroupDirs finds it).
func v1Dir(root, selfCgroup, controller string) (string, bool) {
	for _, line := range strings.Split(strings.TrimSpace(selfCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[1] == "" || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		if !slices.Contains(strings.Split(parts[1], ","), controller) {
			continue
		}
		if slices.Contains(strings.Split(parts[2], "/"), "..") {
			return "", false
		}
		return filepath.Join(root, parts[1], parts[2]), true
	}
	return "", false
}

// join moves thread tid (of this process) into the run's cgroups.
func (c *runCgroups) join(tid int) error {
	return moveThread(c.dirs, tid)
}

// leave moves thread tid back into this process's own cgroups.
func (c *runCgroups) leave(tid int) error {
	return moveThread(c.own, tid)
}

func moveThread(dirs []string, tid int) error {
	for _, d := range dirs {
		if err := os.WriteFile(d+"/tasks", []byte(strconv.Itoa(tid)), 0); err != nil {
			return fmt.Errorf("moving the thread that starts runsc into %s: %w", d, err)
		}
	}
	return nil
}

// setCPUQuota writes a CPU quota into the run's cpu cgroup: where the
// quota hook could not be made, before the boot.
func (c *runCgroups) setCPUQuota(quota int64, period uint64) error {
	if c.cpu == "" {
		return errors.New("the sandbox has no cpu cgroup")
	}
	for _, f := range [][2]string{{"cpu.cfs_period_us", strconv.FormatUint(period, 10)}, {"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)}} {
		if err := os.WriteFile(filepath.Join(c.cpu, f[0]), []byte(f[1]), 0); err != nil {
			return fmt.Errorf("setting the sandbox's CPU quota: %w", err)
		}
	}
	return nil
}

// cgroupsFile, in a run's directory, lists the cgroups the run made,
// one directory a line, for GC: a run whose agentkernel was killed
// leaves them (runsc, told to ignore cgroups, does not remove them),
// and GC's own cgroup, below which it would look, may not be the run's.
const cgroupsFile = "cgroups"

// record writes the run's cgroups into dir's cgroupsFile.
func (c *runCgroups) record(dir string) error {
	return os.WriteFile(filepath.Join(dir, cgroupsFile), []byte(strings.Join(c.dirs, "\n")+"\n"), 0o600)
}

// recordedCgroups are the cgroups a run's directory lists: only
// directories below /sys/fs/cgroup named name are taken.
func recordedCgroups(dir, name string) []string {
	b, err := os.ReadFile(filepath.Join(dir, cgroupsFile))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line != filepath.Clean(line) || !strings.HasPrefix(line, "/sys/fs/cgroup/") || filepath.Base(line) != name {
			continue
		}
		out = append(out, line)
	}
	return out
}

// remove removes the run's cgroups, reporting whether any of them is
// still there (a process still in it).
func (c *runCgroups) remove() (left bool) {
	for _, d := range c.dirs {
		if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
			left = true
		}
	}
	return left
}
