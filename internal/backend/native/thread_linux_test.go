package native

import (
	"context"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestThreadBuiltSandbox: a run as root builds its sandbox on a thread of
// the caller. PID 1 is the stub init and the command PID 2; orphans that
// exit are reaped (no zombie); the caller's own mount namespace, root
// and mounts are what they were; the re-executed init still works when
// asked for.
func TestThreadBuiltSandbox(t *testing.T) {
	requireThreadBuilt(t)
	nsBefore, _ := os.Readlink("/proc/self/ns/mnt")
	netBefore, _ := os.Readlink("/proc/self/ns/net")
	mountsBefore := mountTable(t)
	wdBefore, _ := os.Getwd()

	o := mustRun(t, newSpec("sh", "-c", `cat /proc/1/comm; echo self=$$
		(sleep 0.2 &)            # an orphan: reparented to PID 1, exits there
		sleep 0.6
		for s in /proc/[0-9]*/stat; do read -r line < $s 2>/dev/null && case "$line" in *") Z "*) echo "zombie: $line";; esac; done
		exit 7`), 7)
	lines := strings.Split(strings.TrimSpace(o.stdout), "\n")
	if len(lines) < 2 || lines[0] != "agentkernel-ini" || lines[1] != "self=2" {
		t.Errorf("PID 1 / command: %q", o.stdout)
	}
	if strings.Contains(o.stdout, "zombie") {
		t.Errorf("an exited orphan stayed a zombie: %q", o.stdout)
	}

	// Many runs on (ever new) threads, in parallel with this goroutine's
	// own file operations: none of it leaks out of the thread.
	for i := 0; i < 5; i++ {
		mustRun(t, newSpec("true"), 0)
		if wd, _ := os.Getwd(); wd != wdBefore {
			t.Fatalf("cwd changed to %q", wd)
		}
		if _, err := os.Stat(testImage); err != nil {
			t.Fatalf("host path unreachable after a run: %v", err)
		}
	}
	nsAfter, _ := os.Readlink("/proc/self/ns/mnt")
	netAfter, _ := os.Readlink("/proc/self/ns/net")
	if nsAfter != nsBefore || netAfter != netBefore {
		t.Errorf("namespaces changed: mnt %s → %s, net %s → %s", nsBefore, nsAfter, netBefore, netAfter)
	}
	if m := mountTable(t); m != mountsBefore {
		t.Errorf("mount table changed:\n%s\n---\n%s", mountsBefore, m)
	}

	t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
	o = mustRun(t, newSpec("sh", "-c", "cat /proc/1/comm; exit 5"), 5)
	if strings.TrimSpace(o.stdout) == "agentkernel-ini" {
		t.Errorf("AGENTKERNEL_REEXEC_INIT=1: PID 1 is %q, want the re-executed init", o.stdout)
	}
}

// TestPreparedThreadsEnd: a prepared sandbox's thread waits for its
// command and ends with it, and so does a discarded one's: no goroutine
// (and so no locked thread) stays behind in a long-lived process.
func TestPreparedThreadsEnd(t *testing.T) {
	requireRoot(t)
	if execStub == "" {
		t.Skip("no stub on this architecture")
	}
	b := New(Options{DataDir: t.TempDir()})
	before := runtime.NumGoroutine()
	for i := 0; i < 6; i++ {
		p := prepare(t, b, newSpec())
		if i%2 == 0 {
			p.Close()
			continue
		}
		res, err := p.Run(context.Background(), []string{"true"}, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run: %v %+v", err, res)
		}
	}
	b.Drain()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestStagedMountsMatchInit: /proc with its masks, /dev, /sys, /tmp and
// /run, which PID 1 stages for a thread-built sandbox, come out with the
// same file systems, options and device nodes as when the re-executed
// init mounts them in place.
func TestStagedMountsMatchInit(t *testing.T) {
	requireThreadBuilt(t)
	// Mount point, file system type, source and options of every mount,
	// then /dev's listing.
	script := `while read -r _ _ _ _ mp opts rest; do echo "$mp $opts ${rest#*- }"; done < /proc/self/mountinfo | sort; ls -ln /dev /dev/pts | sed 's/ [A-Z][a-z][a-z] .*:[0-9][0-9] / /'`
	view := func() string {
		spec := newSpec("sh", "-c", script)
		return mustRun(t, spec, 0).stdout
	}
	thread := view()
	t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
	reexec := view()
	if thread != reexec {
		t.Errorf("the thread-built sandbox's mounts differ from the re-executed init's:\n--- thread\n%s\n--- re-executed init\n%s", thread, reexec)
	}
	for _, want := range []string{"/proc/kcore", "/proc/sys ro", "/sys ro", "/dev/pts", "/dev/shm", "/tmp rw"} {
		if !strings.Contains(thread, want) && !(want == "/proc/kcore" && !exists("/proc/kcore")) {
			t.Errorf("no %q among the mounts:\n%s", want, thread)
		}
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// requireThreadBuilt skips a test of thread-built sandboxes where runs
// use the re-executed init.
func requireThreadBuilt(t *testing.T) {
	t.Helper()
	requireRoot(t)
	if execStub == "" {
		t.Skip("no stub on this architecture: runs use the re-executed init")
	}
	if os.Getenv("AGENTKERNEL_REEXEC_INIT") != "" {
		t.Skip("AGENTKERNEL_REEXEC_INIT is set: every run uses the re-executed init")
	}
}
