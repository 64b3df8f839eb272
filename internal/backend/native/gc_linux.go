package native

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

const (
	// lockFile in a run directory is flock'ed by the agentkernel process
	// that owns the run; a lock that can be taken means the owner died.
	lockFile = "lock"
	// keptFile marks a run directory kept on purpose (--keep): GC leaves
	// it alone.
	keptFile = "kept"
	// cgroupGrace protects cgroups that were just created and are still
	// empty because their init has not joined yet.
	cgroupGrace = 30 * time.Second
)

// GC removes what crashed runs left behind: run directories under
// dataDir/runs whose owner is dead (and that were not kept on purpose),
// the empty cgroups of dataDir's sandboxes (cgroupName; with no dataDir,
// the untagged ones of runs without one), mounts under dataDir/runs, and
// stale files of the seccomp cache. It returns what it removed (but for
// the cache).
func GC(ctx context.Context, dataDir string) (removed []string, err error) {
	var errs []error
	if dataDir != "" {
		runs := filepath.Join(dataDir, "runs")
		for _, m := range staleMounts(runs) {
			if uerr := unix.Unmount(m, unix.MNT_DETACH); uerr == nil {
				removed = append(removed, m)
			}
		}
		ents, _ := os.ReadDir(runs)
		for _, e := range ents {
			if ctx.Err() != nil {
				return removed, ctx.Err()
			}
			dir := filepath.Join(runs, e.Name())
			if _, err := os.Stat(filepath.Join(dir, keptFile)); err == nil {
				continue
			}
			if !ownerDead(filepath.Join(dir, lockFile)) {
				continue
			}
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, dir)
		}
		// Compiled filters of other builds, and temporary files of
		// runs killed while writing one.
		if id, err := exeIdentity(); err == nil {
			pruneSeccompCache(filepath.Join(dataDir, "cache", "seccomp"), exePrefix(id))
		}
	}
	// Host id blocks reserved by sandboxes of data directories that no
	// longer exist (removed by hand, or a test's).
	if os.Geteuid() == 0 {
		freed, err := GCIDs("", nil, false)
		removed = append(removed, freed...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Empty cgroups of this data directory's sandboxes only (cgroupName):
	// another data directory's are its own GC's to judge.
	owner := dataDirTag(dataDir)
	for _, parent := range cgroupParents() {
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			if !e.IsDir() || !ownedBy(e.Name(), owner) {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			pids, _ := cgroups.GetPids(dir)
			if len(pids) > 0 {
				continue // a live sandbox
			}
			if fi, err := os.Stat(dir); err != nil || time.Since(fi.ModTime()) < cgroupGrace {
				continue
			}
			if err := removeCgroupDir(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}

// ownerDead reports whether the lock file of a run can be locked, i.e.
// the process that held it is gone.
func ownerDead(lock string) bool {
	f, err := os.OpenFile(lock, os.O_RDWR, 0)
	if err != nil {
		return os.IsNotExist(err)
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// cgroupParents are the directories agentkernel creates sandbox cgroups
// in: "agentkernel" directories anywhere in the first levels of each
// hierarchy (v1 sandboxes nest under their caller's own cgroup, which
// differs between callers) and the usual places.
func cgroupParents() []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	own, _ := cgroups.ParseCgroupFile("/proc/self/cgroup")
	var roots []string
	if cgroups.IsCgroup2UnifiedMode() {
		add(filepath.Join(cgroupRoot, cgroupParent))
		if p, ok := own[""]; ok {
			add(filepath.Dir(filepath.Join(cgroupRoot, p)))
		}
		roots = []string{cgroupRoot}
	} else {
		for _, c := range v1Hierarchies() {
			add(filepath.Join(cgroupRoot, c, cgroupParent))
			add(filepath.Join(v1OwnDir(c, own[c]), cgroupParent))
			roots = append(roots, filepath.Join(cgroupRoot, c))
		}
	}
	for _, root := range roots {
		findNamed(root, cgroupParent, 4, add)
	}
	return out
}

// findNamed calls found for every directory called name at most depth
// levels below dir (not descending into sandbox cgroups).
func findNamed(dir, name string, depth int, found func(string)) {
	if depth == 0 {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), cgroupPrefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if e.Name() == name {
			found(p)
		}
		findNamed(p, name, depth-1, found)
	}
}

// staleMounts lists mount points under dir in this mount namespace,
// deepest first. Sandboxes mount only in their own namespaces, so any hit
// is a leftover of an older layout or a crash mid-way.
func staleMounts(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
