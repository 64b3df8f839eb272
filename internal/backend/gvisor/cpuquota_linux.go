package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// A sandbox's CPU quota is written into its cgroup after gVisor has
// booted and before its first process starts, not by runsc as it makes
// the cgroup. gVisor's kernel (the Sentry) boots inside the sandbox's
// cgroup: under a quota of half a CPU its start-up, our cost rather than
// the command's, took twice as long (about 170 ms more for a run of
// /bin/true on an idle 2-vCPU machine). The memory and process limits
// are runsc's as before, from the sandbox's first process on.
//
// The quota is written by an OCI createRuntime hook, which runsc runs
// once the sandbox exists and before it starts the container's process:
// /bin/sh writing cpu.max (cgroup v2) or cpu.cfs_period_us and
// cpu.cfs_quota_us (v1) in the cgroup runsc made. A hook that fails
// fails the run before the command has started (runsc destroys the
// container), so no command ever runs without its quota. Where the
// cgroup's place cannot be worked out here, or there is no /bin/sh,
// config.json carries the quota as before.

// hookShell runs the quota hook.
const hookShell = "/bin/sh"

// hookScript writes each FILE VALUE pair of its arguments after the
// first (a cgroup directory) into that directory; it fails on the first
// write that fails.
const hookScript = `set -e; d=$1; shift; while [ $# -ge 2 ]; do printf '%s' "$2" > "$d/$1"; shift 2; done`

// hookTimeout is how long runsc lets the hook run, in seconds.
const hookTimeout = 10

// cgroup2Magic is cgroup v2's file system magic number.
const cgroup2Magic = 0x63677270

// cpuQuotaHook moves s's CPU quota (if it has one) out of its resources
// and into a createRuntime hook that writes it into the cgroup runsc
// makes at s.Linux.CgroupsPath. It leaves s as it is when the hook
// cannot be made.
func cpuQuotaHook(s *specs.Spec) {
	if s.Linux == nil || s.Linux.Resources == nil || s.Linux.CgroupsPath == "" {
		return
	}
	cpu := s.Linux.Resources.CPU
	if cpu == nil || cpu.Quota == nil || cpu.Period == nil || cpu.Shares != nil || cpu.Cpus != "" || cpu.Mems != "" {
		return
	}
	if st, err := os.Stat(hookShell); err != nil || !st.Mode().IsRegular() {
		return
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return
	}
	dir, files, err := quotaFiles(string(cg), isCgroup2Only(), s.Linux.CgroupsPath, *cpu.Quota, *cpu.Period)
	if err != nil {
		return
	}
	args := []string{"sh", "-c", hookScript, "sh", dir}
	for _, f := range files {
		args = append(args, f[0], f[1])
	}
	timeout := hookTimeout
	if s.Hooks == nil {
		s.Hooks = &specs.Hooks{}
	}
	s.Hooks.CreateRuntime = append(s.Hooks.CreateRuntime, specs.Hook{Path: hookShell, Args: args, Timeout: &timeout})
	s.Linux.Resources.CPU = nil
}

func isCgroup2Only() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == cgroup2Magic
}

// quotaFiles is where runsc makes the cgroup named by the relative path
// name for a process in the cgroups that selfCgroup (/proc/self/cgroup)
// lists, and the files (name, content) that set the CPU quota there:
// on a pure cgroup v2 host beside the process's own cgroup (runsc uses
// its parent, which holds no process), on v1 below the cpu controller's.
func quotaFiles(selfCgroup string, v2 bool, name string, quota int64, period uint64) (string, [][2]string, error) {
	if name == "" || filepath.IsAbs(name) || slices.Contains(strings.Split(name, "/"), "..") {
		return "", nil, errors.New("not a relative cgroup path")
	}
	for _, line := range strings.Split(strings.TrimSpace(selfCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		q, p := strconv.FormatInt(quota, 10), strconv.FormatUint(period, 10)
		if v2 && parts[0] == "0" && parts[1] == "" {
			dir := filepath.Join("/sys/fs/cgroup", filepath.Dir(parts[2]), name)
			return dir, [][2]string{{"cpu.max", q + " " + p}}, nil
		}
		if !v2 && slices.Contains(strings.Split(parts[1], ","), "cpu") {
			// Where a run that makes its own cgroups made it
			// (owncgroup_linux.go), and runsc makes its.
			own, ok := v1Dir("/sys/fs/cgroup", selfCgroup, "cpu")
			if !ok {
				return "", nil, errors.New("no cpu cgroup")
			}
			return filepath.Join(own, name), [][2]string{{"cpu.cfs_period_us", p}, {"cpu.cfs_quota_us", q}}, nil
		}
	}
	return "", nil, errors.New("no cpu cgroup")
}
