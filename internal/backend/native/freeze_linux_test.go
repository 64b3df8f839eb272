package native

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestFreeze: Freeze holds every process of a sandbox's cgroup still,
// including the children a busy parent keeps forking, and thaw lets
// them go on; on v1 the freezer cgroup made for it is gone afterwards.
func TestFreeze(t *testing.T) {
	testenv.RequireRoot(t)
	b := New(Options{DataDir: t.TempDir()})
	id := randomID()
	cg, err := newCgroup(cgroupName(id, b.cgOwner), sandbox.Resources{}, false, true)
	if err != nil {
		testenv.Missing(t, "cgroups: %v", err)
	}
	t.Cleanup(func() { _ = cg.destroy() })
	pid, moving := busyForker(t)
	if err := cg.join(pid, false); err != nil {
		t.Fatal(err)
	}
	checkFreezes(t, moving, func() (func() error, error) { return b.Freeze(id, "") })
	if fz := filepath.Join(cgroupRoot, "freezer", cgroupParent, cgroupName(id, b.cgOwner)); !cg.v2 {
		if _, err := os.Stat(fz); !os.IsNotExist(err) {
			t.Errorf("freezer cgroup left: %v", err)
		}
	}
	if _, err := b.Freeze(randomID(), ""); err == nil {
		t.Error("froze a sandbox that has no cgroup")
	}
}

// busyForker starts a parent that forks a child per step, each child
// writing the count; moving reports whether the count still moves.
func busyForker(t *testing.T) (pid int, moving func() bool) {
	counter := filepath.Join(t.TempDir(), "counter")
	cmd := exec.Command("sh", "-c", `i=0; while :; do i=$((i+1)); (echo $i > "$0"); done`, counter)
	// Its own process group, so that the cleanup also ends the subshell
	// of the moment, which would otherwise write the counter once more
	// while the temporary directory is removed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	read := func() string { b, _ := os.ReadFile(counter); return strings.TrimSpace(string(b)) }
	return cmd.Process.Pid, func() bool {
		a := read()
		for i := 0; i < 50; i++ {
			time.Sleep(10 * time.Millisecond)
			if read() != a {
				return true
			}
		}
		return false
	}
}

// checkFreezes checks that freeze stops what moving watches and that
// its thaw lets it go on.
func checkFreezes(t *testing.T, moving func() bool, freeze func() (func() error, error)) {
	t.Helper()
	if !moving() {
		t.Fatal("the counter does not move before the freeze")
	}
	thaw, err := freeze()
	if err != nil {
		t.Fatal(err)
	}
	frozen := !moving()
	if err := thaw(); err != nil {
		t.Fatal(err)
	}
	if !frozen {
		t.Error("the sandbox's processes ran on while frozen")
	}
	if !moving() {
		t.Error("the sandbox's processes did not run again after thaw")
	}
}

// TestFreezeV2 is TestFreeze's check of the cgroup v2 freezer, in a
// cgroup of the unified hierarchy (on a hybrid host, the one mounted at
// /sys/fs/cgroup/unified).
func TestFreezeV2(t *testing.T) {
	testenv.RequireRoot(t)
	root := filepath.Join(cgroupRoot, "unified")
	if cgroups.IsCgroup2UnifiedMode() {
		root = cgroupRoot
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		testenv.Missing(t, "no cgroup v2 hierarchy: %v", err)
	}
	dir := filepath.Join(root, "agentkernel-freeze-test-"+randomID())
	if err := os.Mkdir(dir, 0o755); err != nil {
		testenv.Missing(t, "cgroup v2: %v", err)
	}
	pid, moving := busyForker(t)
	t.Cleanup(func() {
		for _, p := range readProcs(dir) {
			_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(p)), 0)
		}
		_ = os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		testenv.Missing(t, "joining a cgroup v2: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err != nil {
		testenv.Missing(t, "no cgroup v2 freezer: %v", err)
	}
	checkFreezes(t, moving, func() (func() error, error) { return freezeV2(dir) })
}

// TestThawAbandoned: a Freeze whose caller died before it thawed (its
// thaw never called) is undone by Thaw of the sandbox's id: the
// processes run again and, on v1, the freezer cgroup made for the freeze
// is gone; Thaw of a sandbox that is not frozen changes nothing.
func TestThawAbandoned(t *testing.T) {
	testenv.RequireRoot(t)
	b := New(Options{DataDir: t.TempDir()})
	id := randomID()
	cg, err := newCgroup(cgroupName(id, b.cgOwner), sandbox.Resources{}, false, true)
	if err != nil {
		testenv.Missing(t, "cgroups: %v", err)
	}
	t.Cleanup(func() { _ = cg.destroy() })
	pid, moving := busyForker(t)
	if err := cg.join(pid, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Thaw(id, ""); err != nil || !moving() {
		t.Fatalf("Thaw of a sandbox that is not frozen: %v (moving: %v)", err, moving())
	}
	if _, err := b.Freeze(id, ""); err != nil {
		t.Fatal(err)
	}
	if moving() {
		t.Fatal("the processes ran on while frozen")
	}
	if err := b.Thaw(id, ""); err != nil {
		t.Fatal(err)
	}
	if !moving() {
		t.Error("the processes did not run again after Thaw")
	}
	if fz := filepath.Join(cgroupRoot, "freezer", cgroupParent, cgroupName(id, b.cgOwner)); !cg.v2 {
		if _, err := os.Stat(fz); !os.IsNotExist(err) {
			t.Errorf("freezer cgroup left: %v", err)
		}
	}
}
