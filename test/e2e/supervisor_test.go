//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSandboxSupervisorIsStub: on amd64 a running sandbox's supervisor
// is the waiting stub (a few KiB, not a Go runtime); the init serves
// clients itself. When the init dies on its own the stub runs the
// reaper, which records why, removes the socket and the cgroup, and
// ends the supervisor. AGENTKERNEL_SUPERVISOR_NO_STUB=1 (the path of
// other architectures) keeps a Go supervisor waiting: same behaviour.
func TestSandboxSupervisorIsStub(t *testing.T) {
	for _, goSup := range []bool{false, true} {
		name := "stub"
		if goSup {
			name = "gosup"
		}
		t.Run(name, func(t *testing.T) {
			a := newAK(t)
			if goSup {
				a.env = append(a.env, "AGENTKERNEL_SUPERVISOR_NO_STUB=1")
			}
			a.must("sandbox", "create", name, "--image", "host", "--start")
			t.Cleanup(func() { a.run("sandbox", "rm", "--force", name) })
			sup, ini, err := sandboxPids(a.dataDir, name)
			if err != nil {
				t.Fatal(err)
			}
			cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(sup) + "/cmdline")
			isStub := strings.TrimRight(string(cmd), "\x00") == "agentkernel:supervise"
			if want := !goSup && runtime.GOARCH == "amd64"; isStub != want {
				t.Fatalf("supervisor cmdline %q (want the stub: %v)", cmd, want)
			}
			if isStub {
				if m, err := readMem(sup); err != nil || m.rss > 1024 {
					t.Errorf("stub supervisor RSS %d kB (%v)", m.rss, err)
				}
			}
			if r := a.run("exec", name, "--", "sh", "-c", "echo ok; exit 7"); r.stdout != "ok\n" || r.code != 7 {
				t.Errorf("exec: %v", r)
			}
			// The init dies on its own: recorded, cleaned up, supervisor gone.
			if err := syscall.Kill(ini, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for syscall.Kill(sup, 0) == nil && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if syscall.Kill(sup, 0) == nil {
				if st, _ := os.ReadFile("/proc/" + strconv.Itoa(sup) + "/stat"); !strings.Contains(string(st), ") Z ") {
					t.Fatalf("supervisor %d still runs after its init died", sup)
				}
			}
			i := a.info(name)
			if i.Status != "stopped" || !strings.Contains(i.StopReason, "killed by signal 9") {
				t.Errorf("after the init was killed: %+v", i)
			}
			dir := filepath.Join(a.dataDir, "sandboxes", name)
			if _, err := os.Stat(filepath.Join(dir, "sock")); err == nil {
				t.Errorf("socket left behind")
			}
			if data, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(data), a.dataDir) {
				t.Errorf("mount left under %s", a.dataDir)
			}
			// It starts again, and a stop is the user's, not a crash.
			a.must("sandbox", "start", name)
			a.must("sandbox", "stop", name)
			if i := a.info(name); i.Status != "stopped" || i.StopReason != "stopped by user" {
				t.Errorf("after stop: %+v", i)
			}
		})
	}
}
