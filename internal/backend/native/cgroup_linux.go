package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/hostidmap"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// errNoCgroups means limits cannot be applied here (rootless without a
// delegated cgroup, or a hierarchy the caller may not write): the
// fallback ladder (Ladder) refuses the run unless allow_degraded names
// "cgroups".
var errNoCgroups = errors.New("no cgroup this user may create")

const (
	cgroupRoot   = "/sys/fs/cgroup"
	cgroupParent = "agentkernel"
	cgroupPrefix = "agentkernel-"
	// cfsPeriod is the CPU bandwidth period, the kernel's default (a new v1
	// cgroup starts with it); CPUPercent scales the quota.
	cfsPeriod = 100000
)

// v1Controllers are the cgroup v1 hierarchies a sandbox with limits joins.
var v1Controllers = []string{"memory", "pids", "cpu"}

// v1Hierarchies are the v1 hierarchies a sandbox's cgroups may be in:
// v1Controllers, and cpuacct where it is a hierarchy of its own (most
// hosts mount it with cpu), which a persistent sandbox also joins so
// that its CPU time can be read (cgroupUsage).
var v1Hierarchies = sync.OnceValue(func() []string {
	if cpuacctSeparate() {
		return append(slices.Clone(v1Controllers), "cpuacct")
	}
	return v1Controllers
})

// cpuacctSeparate reports whether the cpuacct controller is mounted as a
// v1 hierarchy apart from cpu's (on most hosts both names lead to one
// hierarchy, "cpu,cpuacct").
func cpuacctSeparate() bool {
	cpu, err1 := os.Stat(filepath.Join(cgroupRoot, "cpu"))
	acct, err2 := os.Stat(filepath.Join(cgroupRoot, "cpuacct"))
	if err1 != nil || err2 != nil || os.SameFile(cpu, acct) {
		return false
	}
	_, err := os.Stat(filepath.Join(cgroupRoot, "cpuacct", "cpuacct.usage"))
	return err == nil
}

// cgroup is one sandbox's cgroup: one directory per v1 controller, or one
// unified directory.
type cgroup struct {
	dirs []string // one per v1 controller, or the unified directory
	v2   bool
	gone atomic.Bool // every directory is removed
	// oomFile is the memory controller's file with its oom_kill counter
	// (memory.events on v2, memory.oom_control on v1), when a memory
	// limit is set; ooms the counter as last read (oomKills), kept for
	// after the directories are gone.
	oomFile string
	ooms    atomic.Int64
	// oomFd is oomFile kept open (plus one; 0 when not open), read with
	// pread at each exec of a persistent sandbox (before and after the
	// command) rather than opened each time; closed once the cgroup is
	// removed.
	oomMu sync.Mutex
	oomFd int
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

// cgroupName is the name of the cgroup of the sandbox id made by a
// backend of the data directory whose dataDirTag is owner:
// agentkernel-<owner>-<id>, so that GC of one data directory can tell its
// own leftovers from another's; agentkernel-<id> without a data
// directory (and from versions that did not tag them). Sandbox ids hold
// no '-'.
func cgroupName(id, owner string) string {
	if owner == "" {
		return cgroupPrefix + id
	}
	return cgroupPrefix + owner + "-" + id
}

// ownedBy reports whether the cgroup called name belongs to the data
// directory whose tag is owner (cgroupName): tagged with owner, or, for
// owner "" (no data directory), not tagged at all.
func ownedBy(name, owner string) bool {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	if !ok {
		return false
	}
	if owner != "" {
		return strings.HasPrefix(rest, owner+"-")
	}
	tag, _, tagged := strings.Cut(rest, "-")
	return !(tagged && len(tag) == 9 && tag[0] == 'd' && isHex(tag[1:]))
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// sandboxCgroups are the existing cgroup directories of the sandbox id
// made by a backend whose data directory's tag is owner, under either
// name (cgroupName).
func sandboxCgroups(id, owner string) []string {
	names := []string{cgroupName(id, owner)}
	if owner != "" {
		names = append(names, cgroupName(id, ""))
	}
	var out []string
	for _, parent := range cgroupParents() {
		for _, n := range names {
			d := filepath.Join(parent, n)
			if _, err := os.Stat(d); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// newCgroup creates and configures the cgroup called name
// (cgroupName); with accounting, on v1, it is also made in a cpuacct
// hierarchy of its own (v1Hierarchies), for a sandbox whose CPU time is
// asked for later (persistent ones). It returns an error wrapping errNoCgroups when the
// caller may not create cgroups. 'agentkernel doctor' asks the same
// (ProbeCgroups).
func newCgroup(name string, r sandbox.Resources, rootless, accounting bool) (*cgroup, error) {
	res := resources(r)
	cfg := &cgroups.Cgroup{Resources: res, Rootless: rootless}
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
			if rootless || notWritable(err) {
				return nil, fmt.Errorf("%w: %v", errNoCgroups, err)
			}
			return nil, fmt.Errorf("creating cgroup: %w", err)
		}
		cg := &cgroup{dirs: []string{dir}, v2: true}
		if r.MemoryMB > 0 {
			cg.oomFile = filepath.Join(dir, "memory.events")
		}
		if err := m.Set(res); err != nil {
			_ = cg.destroy()
			return nil, fmt.Errorf("setting cgroup limits: %w", err)
		}
		return cg, nil
	}
	return newCgroupV1(name, r, rootless, accounting)
}

// newCgroupV1 makes the cgroup name in the memory, pids and cpu v1
// hierarchies (and, with accounting, a cpuacct one of its own) and writes its limits with plain system calls.
//
// opencontainers/cgroups' fs manager does more than a fresh cgroup
// needs, on every run's path (BenchmarkCgroupNewDestroy measures the
// two; docs/perf-log.md): it
// registers every file with the poller, reads the limit it is about to
// raise, writes the CFS period at its default and stats the hierarchy
// and the parents. A fresh cgroup needs none of
// those: its memory and memory+swap limits are unlimited (so the memory
// limit can be set first) and its period is the kernel's default. The
// library's fs2 manager keeps the v2 layout.
func newCgroupV1(name string, r sandbox.Resources, rootless, accounting bool) (*cgroup, error) {
	own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	cg := &cgroup{}
	fail := func(err error) (*cgroup, error) {
		_ = cg.destroy()
		if rootless || notWritable(err) {
			return nil, fmt.Errorf("%w: %v", errNoCgroups, err)
		}
		return nil, err
	}
	controllers := v1Controllers
	if accounting {
		controllers = v1Hierarchies()
	}
	for _, c := range controllers {
		parent := filepath.Join(cgroupRoot, c, own[c], cgroupParent)
		dir := filepath.Join(parent, name)
		err := unix.Mkdir(dir, 0o755)
		if errors.Is(err, unix.ENOENT) {
			// The first run: make <own cgroup>/agentkernel, unless the
			// hierarchy is not mounted at all.
			if _, serr := os.Stat(filepath.Join(cgroupRoot, c, "cgroup.procs")); serr != nil {
				continue
			}
			// Inside a container the hierarchy is mounted from the
			// container's own cgroup, not from its root.
			parent = filepath.Join(v1OwnDir(c, own[c]), cgroupParent)
			dir = filepath.Join(parent, name)
			if err = os.MkdirAll(parent, 0o755); err == nil {
				err = unix.Mkdir(dir, 0o755)
			}
		}
		if err != nil {
			// The parent, not the cgroup's own random name: the message
			// is the same for every run (a warning, when rootless).
			return fail(fmt.Errorf("creating a cgroup in %s: %w", parent, err))
		}
		cg.dirs = append(cg.dirs, dir)
		if c == "memory" && r.MemoryMB > 0 {
			cg.oomFile = filepath.Join(dir, "memory.oom_control")
		}
		if err := setV1Limits(c, dir, r); err != nil {
			return fail(fmt.Errorf("setting cgroup limits: %w", err))
		}
	}
	if len(cg.dirs) == 0 {
		return nil, fmt.Errorf("%w: no cgroup v1 memory/pids/cpu hierarchy", errNoCgroups)
	}
	return cg, nil
}

// notWritable reports whether err means the caller may not write the
// cgroup hierarchy at all (not its to write, or mounted read-only, as a
// container mounts it): the fallback ladder's case, not a failure.
func notWritable(err error) bool {
	return errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EROFS)
}

// v1OwnDir is the directory of the cgroup path own (as /proc/self/cgroup
// names it) in controller c's v1 hierarchy: /sys/fs/cgroup/c/own, or,
// where the hierarchy is mounted from a cgroup below its root (inside a
// container that shares the host's cgroup namespace, whose mount starts
// at the container's own cgroup), the same cgroup under that mount.
func v1OwnDir(c, own string) string {
	dir := filepath.Join(cgroupRoot, c, own)
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return dir
	}
	if d, ok := v1OwnDirIn(string(b), c, own); ok {
		return d
	}
	return dir
}

// v1OwnDirIn is v1OwnDir's answer from a mountinfo table: the mount of
// controller c's hierarchy at /sys/fs/cgroup/..., its root a prefix of
// own.
func v1OwnDirIn(mountinfo, c, own string) (string, bool) {
	for _, line := range strings.Split(mountinfo, "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || g[0] != "cgroup" || !slices.Contains(strings.Split(g[2], ","), c) {
			continue
		}
		root, mnt := hostidmap.UnescapeMount(f[3]), hostidmap.UnescapeMount(f[4])
		if !strings.HasPrefix(mnt, cgroupRoot+"/") {
			continue
		}
		rel, ok := strings.CutPrefix(own, root)
		if !ok || root != "/" && rel != "" && rel[0] != '/' {
			continue
		}
		return filepath.Join(mnt, rel), true
	}
	return "", false
}

// setV1Limits writes controller c's limits into the fresh cgroup dir.
func setV1Limits(c, dir string, r sandbox.Resources) error {
	res := resources(r)
	switch c {
	case "memory":
		if res.Memory > 0 {
			if err := writeCgroupFile(dir, "memory.limit_in_bytes", res.Memory); err != nil {
				return err
			}
			// Absent when the kernel does not account swap: then there
			// is nothing to keep the sandbox from.
			if err := writeCgroupFile(dir, "memory.memsw.limit_in_bytes", res.MemorySwap); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
		}
	case "pids":
		if res.PidsLimit != nil {
			return writeCgroupFile(dir, "pids.max", *res.PidsLimit)
		}
	case "cpu":
		if res.CpuQuota > 0 {
			// A new cgroup's period is the kernel's default, which
			// cfsPeriod is: only the quota needs writing.
			return writeCgroupFile(dir, "cpu.cfs_quota_us", res.CpuQuota)
		}
	}
	return nil
}

// writeCgroupFile writes v as decimal text to dir/file. Both calls are
// retried on EINTR: the Go runtime's preemption signal interrupts a
// write that waits (the memory controller may reclaim in it).
func writeCgroupFile(dir, file string, v int64) error {
	p := dir + "/" + file
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var buf [24]byte
	b := strconv.AppendInt(buf[:0], v, 10)
	_, err = unix.Write(fd, b)
	for err == unix.EINTR {
		_, err = unix.Write(fd, b)
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: p, Err: err}
	}
	return nil
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
// Migration on v1 may wait for an RCU grace period, so the parent does
// it while the init boots.
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
// RCU grace period, so that moving another process in is now and then
// many times slower than usual (docs/perf-log.md).
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

// oomKills is how many of the cgroup's processes the kernel's OOM killer
// ended under its memory limit: the memory controller's oom_kill counter
// (oomFile), which starts at 0 in a fresh cgroup; once the cgroup is
// removed, the count read just before. 0 without a memory limit.
func (c *cgroup) oomKills() int {
	if !c.gone.Load() {
		c.readOOMKills()
	}
	return int(c.ooms.Load())
}

// readOOMKills reads the oom_kill counter into c.ooms (never lowering it).
func (c *cgroup) readOOMKills() {
	if c.oomFile == "" {
		return
	}
	var buf [1024]byte
	c.oomMu.Lock()
	if c.oomFd == 0 && !c.gone.Load() {
		if fd, err := unix.Open(c.oomFile, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			c.oomFd = fd + 1
		}
	}
	n := 0
	if c.oomFd > 0 {
		n, _ = unix.Pread(c.oomFd-1, buf[:], 0)
	}
	c.oomMu.Unlock()
	if n <= 0 {
		return
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		v, ok := strings.CutPrefix(line, "oom_kill ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		for err == nil {
			old := c.ooms.Load()
			if n <= old || c.ooms.CompareAndSwap(old, n) {
				break
			}
		}
	}
}

// destroy kills what is left and removes the cgroup directories.
func (c *cgroup) destroy() error {
	if c.gone.Load() {
		return nil
	}
	c.readOOMKills()
	var errs []error
	for _, d := range c.dirs {
		if err := removeCgroupDir(d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		c.gone.Store(true)
		c.closeOOM()
	}
	return errors.Join(errs...)
}

// tryRemove removes the directories without waiting: it fails while a
// process is still in the cgroup.
func (c *cgroup) tryRemove() bool {
	c.readOOMKills()
	for _, d := range c.dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			return false
		}
	}
	c.gone.Store(true)
	c.closeOOM()
	return true
}

// closeOOM closes oomFd.
func (c *cgroup) closeOOM() {
	c.oomMu.Lock()
	if c.oomFd > 0 {
		unix.Close(c.oomFd - 1)
		c.oomFd = 0
	}
	c.oomMu.Unlock()
}

// cgroupDrain bounds how long removeCgroupDir waits for a cgroup's
// dying processes.
const cgroupDrain = 3 * time.Second

// removeCgroupDir kills the processes of one cgroup directory and removes
// it, retrying while the kernel still counts dying tasks (for up to
// cgroupDrain: a sandbox whose PID 1 was killed with its supervisor is
// counted until its processes have exited and been reaped, which on a
// loaded machine takes longer than a moment).
func removeCgroupDir(d string) error {
	deadline := time.Now().Add(cgroupDrain)
	for i := 0; ; i++ {
		err := unix.Rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || (i >= 50 && time.Now().After(deadline)) {
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

// cgroupUsage reads the memory in use, the CPU time and the process
// count of the sandbox with the given id from its cgroup (sandboxCgroups),
// as the host sees it; ok is false when it has no cgroup (no limits, or
// rootless without delegation).
func cgroupUsage(id, owner string) (memory int64, cpuSeconds float64, pids int, ok bool) {
	readInt := func(path string) (int64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	for _, d := range sandboxCgroups(id, owner) {
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
