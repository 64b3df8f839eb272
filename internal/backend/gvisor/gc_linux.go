package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile is held (flock) by the process running a run for as long as
// its directory exists.
const lockFile = "lock"

// gcGrace protects a run directory that has no lock yet: its run is
// being set up.
const gcGrace = 30 * time.Second

// lockRun takes dir's lock, which the run holds until its directory is
// gone: a directory whose lock is free belongs to a run whose process
// died (GC).
func lockRun(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// GC removes what gvisor runs of dataDir left when their agentkernel
// process died: runsc's container (killing a sandbox that still runs),
// its cgroup, and the run's directory. Runs in progress hold their
// directory's lock and are left alone. It returns what it removed.
func GC(ctx context.Context, dataDir string) ([]string, error) {
	base := filepath.Join(dataDir, "gvisor")
	entries, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	runsc, _ := findRunsc()
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "agentkernel-") {
			continue
		}
		dir := filepath.Join(base, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR, 0)
		if err != nil {
			if info, serr := os.Stat(dir); serr != nil || time.Since(info.ModTime()) < gcGrace {
				continue
			}
		} else {
			busy := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
			if busy {
				f.Close()
				continue
			}
		}
		// A run's runsc state is in the directory, a pooled sandbox's
		// (a boot's) in its gvisor subdirectory.
		for _, state := range []string{dir + "/state", dir + "/gvisor/state"} {
			if left, _ := os.ReadDir(state); containerLeft(left) && runsc != "" {
				_ = exec.CommandContext(ctx, runsc, "--root", state, "delete", "--force", e.Name()).Run()
			}
		}
		removeCgroups(cgroupName(e.Name()))
		removeRecorded(recordedCgroups(dir, cgroupName(e.Name())))
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, dir)
		}
		if f != nil {
			f.Close()
		}
	}
	return removed, errors.Join(errs...)
}

// removeRecorded removes the cgroups a killed run made itself, giving
// its sandbox's last processes (which runsc delete has just killed) a
// moment to leave them.
func removeRecorded(dirs []string) {
	cg := &runCgroups{dirs: dirs}
	for n := 0; n < 100 && cg.remove(); n++ {
		time.Sleep(50 * time.Millisecond)
	}
}
