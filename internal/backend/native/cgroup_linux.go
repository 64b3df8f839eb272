package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// errNoCgroups means limits cannot be applied; the run goes on without
// them after one warning.
var errNoCgroups = errors.New("cgroup limits unavailable (rootless without delegation); running without limits")

const (
	cgroupRoot   = "/sys/fs/cgroup"
	cgroupParent = "agentkernel"
	cgroupPrefix = "agentkernel-"
	// cfsPeriod is the CPU bandwidth period; CPUPercent scales the quota.
	cfsPeriod = 100000
)

// v1Controllers are the cgroup v1 hierarchies a sandbox with limits joins.
var v1Controllers = []string{"memory", "pids", "cpu"}

// cgroup is one sandbox's cgroup: one directory per v1 controller, or one
// unified directory.
type cgroup struct {
	mgr  cgroups.Manager
	dirs []string // one per v1 controller, or the unified directory
	v2   bool
	gone atomic.Bool // every directory is removed
}

// resources translates the Spec's limits. Memory and memory+swap are the
// same value: a sandbox never swaps.
func resources(r sandbox.Resources) *cgroups.Resources {
	res := &cgroups.Resources{SkipDevices: true}
	if r.MemoryMB > 0 {
		res.Memory = r.MemoryMB << 20
		res.MemorySwap = res.Memory
	}
	if r.PIDs > 0 {
		p := r.PIDs
		res.PidsLimit = &p
	}
	if r.CPUPercent > 0 {
		res.CpuPeriod = cfsPeriod
		res.CpuQuota = r.CPUPercent * cfsPeriod / 100
	}
	return res
}

// newCgroup creates and configures agentkernel-<id>. It returns an error
// wrapping errNoCgroups when the caller may not create cgroups.
func newCgroup(id string, r sandbox.Resources, rootless bool) (*cgroup, error) {
	res := resources(r)
	cfg := &cgroups.Cgroup{Resources: res, Rootless: rootless}
	name := cgroupPrefix + id
	if cgroups.IsCgroup2UnifiedMode() {
		dir, err := v2Parent(rootless)
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(dir, name)
		m, err := fs2.NewManager(cfg, dir)
		if err != nil {
			return nil, err
		}
		if err := m.Apply(-1); err != nil {
			if rootless {
				return nil, fmt.Errorf("%w: %v", errNoCgroups, err)
			}
			return nil, fmt.Errorf("creating cgroup: %w", err)
		}
		cg := &cgroup{mgr: m, dirs: []string{dir}, v2: true}
		if err := m.Set(res); err != nil {
			_ = cg.destroy()
			return nil, fmt.Errorf("setting cgroup limits: %w", err)
		}
		return cg, nil
	}
	own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	paths := map[string]string{}
	var dirs []string
	for _, c := range v1Controllers {
		mnt := filepath.Join(cgroupRoot, c)
		if _, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); err != nil {
			continue
		}
		dir := filepath.Join(mnt, own[c], cgroupParent, name)
		paths[c] = dir
		dirs = append(dirs, dir)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no cgroup v1 memory/pids/cpu hierarchy", errNoCgroups)
	}
	m, err := fs.NewManager(cfg, paths)
	if err != nil {
		return nil, err
	}
	cg := &cgroup{mgr: m, dirs: dirs}
	if err := m.Apply(-1); err != nil {
		_ = cg.destroy()
		if rootless || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%w: %v", errNoCgroups, err)
		}
		return nil, fmt.Errorf("creating cgroup: %w", err)
	}
	if err := m.Set(res); err != nil {
		_ = cg.destroy()
		return nil, fmt.Errorf("setting cgroup limits: %w", err)
	}
	return cg, nil
}

// v2Parent is the directory agentkernel-<id> cgroups are created in: the
// agentkernel cgroup below the root for root, the parent of the caller's
// own (delegated) cgroup when rootless.
func v2Parent(rootless bool) (string, error) {
	if !rootless {
		return filepath.Join(cgroupRoot, cgroupParent), nil
	}
	own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(filepath.Join(cgroupRoot, own[""]))
	if unix.Access(dir, unix.W_OK) != nil {
		return "", fmt.Errorf("%w: %s is not writable", errNoCgroups, dir)
	}
	return dir, nil
}

// procsDirs are the v1 directories whose cgroup.procs the init keeps open
// to move its exec stage in (nil on v2, where nothing needs moving).
func (c *cgroup) procsDirs() []string {
	if c.v2 {
		return nil
	}
	return c.dirs
}

// openDir returns an O_PATH descriptor of the v2 cgroup for
// CLONE_INTO_CGROUP, or -1 on v1.
func (c *cgroup) openDir() int {
	if !c.v2 {
		return -1
	}
	fd, err := unix.Open(c.dirs[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// join moves pid into the cgroup (v1; on v2 the init was cloned into it).
// Migration on v1 waits for an RCU grace period — milliseconds on a
// small VM — so the parent does it while the init boots.
func (c *cgroup) join(pid int, cloned bool) error {
	if c.v2 && cloned {
		return nil
	}
	for _, d := range c.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("joining cgroup %s: %w", d, err)
		}
	}
	return nil
}

// openTasks opens the v1 directories' tasks files for a stub that moves
// itself in: it writes "0" to each (stubEnterScript). A task moving
// itself is the one move for which the kernel skips its global
// threadgroup lock, whose first writer after a quiet spell waits for an
// RCU grace period: moving a process in took 0.1 ms in most runs here
// and 3 to 9 ms in one run out of five.
func (c *cgroup) openTasks() ([]*os.File, error) {
	var files []*os.File
	for _, d := range c.dirs {
		f, err := os.OpenFile(filepath.Join(d, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// kill ends every process in the cgroup. The PID namespace's teardown
// normally got there first; this is the second fence.
func (c *cgroup) kill() {
	if c.v2 {
		if err := os.WriteFile(filepath.Join(c.dirs[0], "cgroup.kill"), []byte("1"), 0); err == nil {
			return
		}
	}
	for _, d := range c.dirs {
		pids, _ := cgroups.GetPids(d)
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
	}
}

// destroy kills what is left and removes the cgroup directories.
func (c *cgroup) destroy() error {
	if c.gone.Load() {
		return nil
	}
	var errs []error
	for _, d := range c.dirs {
		if err := removeCgroupDir(d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		c.gone.Store(true)
	}
	return errors.Join(errs...)
}

// tryRemove removes the directories without waiting: it fails while a
// process is still in the cgroup.
func (c *cgroup) tryRemove() bool {
	for _, d := range c.dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			return false
		}
	}
	c.gone.Store(true)
	return true
}

// removeCgroupDir kills the processes of one cgroup directory and removes
// it, retrying while the kernel still counts dying tasks.
func removeCgroupDir(d string) error {
	for i := 0; ; i++ {
		err := unix.Rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || i == 50 {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
		if data, rerr := os.ReadFile(filepath.Join(d, "cgroup.procs")); rerr == nil {
			for _, f := range strings.Fields(string(data)) {
				if p, perr := strconv.Atoi(f); perr == nil {
					_ = unix.Kill(p, unix.SIGKILL)
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// CgroupUsage reads the memory in use, the CPU time and the process
// count of the sandbox with the given id from its cgroup, as the host
// sees it; ok is false when it has no cgroup (no limits, or rootless
// without delegation).
func CgroupUsage(id string) (memory int64, cpuSeconds float64, pids int, ok bool) {
	readInt := func(path string) (int64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	for _, parent := range cgroupParents() {
		d := filepath.Join(parent, cgroupPrefix+id)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		// v2: memory.current, pids.current, cpu.stat usage_usec.
		// v1: one directory per controller.
		if n, found := readInt(filepath.Join(d, "memory.current")); found {
			memory, ok = n, true
		}
		if n, found := readInt(filepath.Join(d, "memory.usage_in_bytes")); found {
			memory, ok = n, true
		}
		if n, found := readInt(filepath.Join(d, "pids.current")); found {
			pids, ok = int(n), true
		}
		if n, found := readInt(filepath.Join(d, "cpuacct.usage")); found {
			cpuSeconds, ok = float64(n)/1e9, true
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpu.stat")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, found := strings.CutPrefix(line, "usage_usec "); found {
					if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
						cpuSeconds, ok = float64(n)/1e6, true
					}
				}
			}
		}
	}
	return memory, cpuSeconds, pids, ok
}
