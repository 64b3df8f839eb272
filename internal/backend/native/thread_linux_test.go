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
	requireRoot(t)
	if execStub == "" {
		t.Skip("no stub on this architecture: runs use the re-executed init")
	}
	if os.Getenv("AGENTKERNEL_REEXEC_INIT") != "" {
		t.Skip("AGENTKERNEL_REEXEC_INIT is set: every run uses the re-executed init")
	}
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
