package engine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/hostidmap"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestGCOwned lays out owned directories as runs leave them under
// DataDir/engine, with their idmapped clones attached in another mount
// namespace (a process in one of its own, as an engine daemon is), and
// checks what gcOwned does: a dead run's mounts are detached there and
// its directory removed, the project behind them untouched; a live
// run's (its lock held), one being made (no lock yet), a link named
// like one and what is not a mount point are left alone.
func TestGCOwned(t *testing.T) {
	testenv.RequireRoot(t)
	data := t.TempDir()
	base := filepath.Join(data, "engine")
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "precious"), []byte("project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "file"), []byte("file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command("sleep", "120")
	daemon.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = daemon.Process.Kill(); _ = daemon.Wait() }()
	pid := daemon.Process.Pid
	owner, lease, err := hostidmap.Lease()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()

	// attach makes an owned directory as ownedBinds does: the project's
	// directory at 0, one of its files at 1, attached in the daemon's
	// namespace; locked says whether its run still holds the lock.
	attach := func(name string, locked bool) (string, *os.File) {
		t.Helper()
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		lock, err := lockOwned(dir)
		if err != nil {
			t.Fatal(err)
		}
		srcs := []string{project, filepath.Join(project, "file")}
		dsts := []string{filepath.Join(dir, "0"), filepath.Join(dir, "1")}
		for i := range srcs {
			if err := hostidmap.MountPoint(srcs[i], dsts[i]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := hostidmap.MountIn(pid, owner, srcs, dsts); err != nil {
			testenv.Missing(t, "idmapped mounts on %s: %v", project, err)
		}
		if !locked {
			lock.Close() // its run died
			return dir, nil
		}
		return dir, lock
	}
	mounted := func(dir string) int {
		t.Helper()
		points, err := hostidmap.MountsUnder(pid, dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(points)
	}

	dead, _ := attach("owned.dead", false)
	live, lock := attach("owned.live", true)
	defer lock.Close()
	if mounted(dead) != 2 || mounted(live) != 2 {
		t.Fatalf("the clones are not attached in the daemon's namespace: %d, %d", mounted(dead), mounted(live))
	}
	// Being made: no lock file yet.
	young := filepath.Join(base, "owned.young")
	if err := os.Mkdir(young, 0o700); err != nil {
		t.Fatal(err)
	}
	// A link named as an owned directory, to a directory that looks
	// like a dead one: never followed.
	elsewhere := t.TempDir()
	for _, n := range []string{"0", ownedLock} {
		if err := os.WriteFile(filepath.Join(elsewhere, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(elsewhere, filepath.Join(base, "owned.link")); err != nil {
		t.Fatal(err)
	}
	// A dead run's directory whose mount point has files in it (a mount
	// gc could not see): never emptied.
	full := filepath.Join(base, "owned.full")
	if err := os.MkdirAll(filepath.Join(full, "0"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "0", "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, ownedLock), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A dead one not made for long, without a lock file (killed before
	// it took it): removed once the grace has passed.
	stale := filepath.Join(base, "owned.stale")
	if err := os.Mkdir(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * ownedGrace)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}

	removed, err := gcOwned(data, []int{pid})
	t.Logf("removed %q, err %v", removed, err)
	if err == nil || !strings.Contains(err.Error(), "owned.full") {
		t.Errorf("gc did not say why it left %s: %v", full, err)
	}
	if n := mounted(dead); n != 0 {
		t.Errorf("%d mounts of the dead run are left in the daemon's namespace", n)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead run's directory is left: %v", err)
	}
	if n := mounted(live); n != 2 {
		t.Errorf("the live run's mounts were touched: %d left of 2", n)
	}
	if _, err := os.Stat(filepath.Join(live, ownedLock)); err != nil {
		t.Errorf("the live run's directory was touched: %v", err)
	}
	for _, p := range []string{young, filepath.Join(full, "0", "precious"), filepath.Join(elsewhere, "0"), filepath.Join(elsewhere, ownedLock), filepath.Join(base, "owned.link")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Errorf("a stale directory without a lock file is left: %v", err)
	}
	for _, n := range []string{"precious", "file"} {
		if b, err := os.ReadFile(filepath.Join(project, n)); err != nil || len(b) == 0 {
			t.Errorf("the project's %s: %q %v", n, b, err)
		}
	}
	// Through the daemon's namespace the live run's clone still works.
	there := "/proc/" + strconv.Itoa(pid) + "/root" + filepath.Join(live, "0", "precious")
	if b, err := os.ReadFile(there); err != nil || string(b) != "project\n" {
		t.Errorf("the live run's clone: %q %v", b, err)
	}
	// Its run ended: the next gc takes it too.
	lock.Close()
	if _, err := gcOwned(data, []int{pid}); err == nil || !strings.Contains(err.Error(), "owned.full") || strings.Contains(err.Error(), "owned.live") {
		t.Errorf("second gc: %v", err)
	}
	if n := mounted(live); n != 0 {
		t.Errorf("%d mounts left once the live run ended", n)
	}
	if _, err := os.Lstat(live); !os.IsNotExist(err) {
		t.Errorf("the ended run's directory is left: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(project, "precious")); err != nil || string(b) != "project\n" {
		t.Errorf("the project after gc: %q %v", b, err)
	}
}
