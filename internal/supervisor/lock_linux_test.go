package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSpawnHoldsLockFirst: spawn takes the supervisor lock before the
// supervisor exists and hands it over, so a second start during the
// first supervisor's start-up finds the lock held (locked) instead of
// free; a lock already held refuses spawn before anything starts; the
// handed-over lock is accepted only for the directory's own file.
func TestSpawnHoldsLockFirst(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, supervisorLockFile)
	marker := filepath.Join(dir, "started")
	// A stand-in supervisor that reports its fds and env, then waits:
	// the lock must be held by it (fd 4) from its very start.
	script := `test "$AGENTKERNEL_SUPERVISOR_LOCK_FD" = 4 && test -e /proc/self/fd/4 && touch ` + marker + `; printf ok >&3; exec 3>&-; exec sleep 30`
	pid, _, err := spawn([]string{"/bin/sh", "sh", "-c", script}, filepath.Join(dir, "log"), lock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the supervisor was not given the lock on fd 4: %v", err)
	}
	if !locked(lock) {
		t.Fatal("the lock is free while the spawned supervisor runs")
	}
	if _, _, err := spawn([]string{"/bin/true", "true"}, filepath.Join(dir, "log"), lock); err == nil || !strings.Contains(err.Error(), "another supervisor") {
		t.Fatalf("a second spawn while the lock is held: %v", err)
	}
	_ = unix.Kill(pid, unix.SIGKILL)
	for i := 0; i < 200 && locked(lock); i++ {
		unix.Nanosleep(&unix.Timespec{Nsec: 10e6}, nil)
	}
	if locked(lock) {
		t.Fatal("the lock outlives its supervisor")
	}

	// takeLock: a handed-over descriptor of another file is refused; of
	// the lock file, flock'ed, it is the lock.
	other, err := os.OpenFile(filepath.Join(dir, "other"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := takeLock(lock, other); err == nil {
		t.Fatal("takeLock took another file for the lock")
	}
	f, err := os.OpenFile(lock, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	unlock, err := takeLock(lock, f)
	if err != nil {
		t.Fatal(err)
	}
	if !locked(lock) {
		t.Fatal("the handed-over lock is not held")
	}
	unlock()
	if locked(lock) {
		t.Fatal("the lock is held after its release")
	}
}
