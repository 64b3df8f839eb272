package native

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

func TestMemoryLimit(t *testing.T) {
	requireRoot(t)
	spec := newSpec("sh", "-c", `x=$(head -c 100000000 /dev/zero | tr "\0" a); echo survived ${#x}`)
	spec.Resources.MemoryMB = 32
	o := runSpec(t, spec, nil)
	if o.err != nil || o.res.ExitCode != 137 {
		t.Fatalf("exit %d err %v stdout %q stderr %q", o.res.ExitCode, o.err, o.stdout, o.stderr)
	}
	// The same allocation fits without the limit.
	spec.Resources.MemoryMB = 0
	if o := mustRun(t, spec, 0); o.stdout != "survived 100000000\n" {
		t.Fatalf("%q", o.stdout)
	}
}

// TestOOMKills: a command the OOM killer ends at the memory limit is
// reported as such (Result.OOMKills), in both ways of building a sandbox;
// one killed by a plain SIGKILL is not; a child killed so is counted
// while the command goes on.
func TestOOMKills(t *testing.T) {
	requireRoot(t)
	// One process that needs 100 MiB: the OOM killer's only choice.
	hog := []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"}
	for _, reexec := range []bool{false, true} {
		t.Run(fmt.Sprintf("reexec=%v", reexec), func(t *testing.T) {
			if reexec {
				t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
			}
			spec := newSpec(hog...)
			spec.Resources.MemoryMB = 32
			o := runSpec(t, spec, nil)
			if o.err != nil || o.res.ExitCode != 137 || o.res.Signal != 9 || o.res.OOMKills < 1 {
				t.Fatalf("over the limit: %+v err %v stderr %q", o.res, o.err, o.stderr)
			}
			if reexec {
				return // the rest does not depend on how the sandbox is built
			}
			spec = newSpec("sh", "-c", "kill -9 $$")
			spec.Resources.MemoryMB = 32
			if o := runSpec(t, spec, nil); o.err != nil || o.res.ExitCode != 137 || o.res.OOMKills != 0 {
				t.Fatalf("plain SIGKILL: %+v err %v", o.res, o.err)
			}
			// A child that hits the limit: the command goes on.
			spec = newSpec(append([]string{"sh", "-c", `"$@" 2>/dev/null; echo child $?`, "sh"}, hog...)...)
			spec.Resources.MemoryMB = 32
			if o := runSpec(t, spec, nil); o.err != nil || o.res.ExitCode != 0 || o.stdout != "child 137\n" || o.res.OOMKills < 1 {
				t.Fatalf("child over the limit: %+v err %v stdout %q", o.res, o.err, o.stdout)
			}
		})
	}
}

func TestPidsLimit(t *testing.T) {
	requireRoot(t)
	// An inner shell starts up to 100 sleepers under a limit of 40 tasks
	// (the init's threads count too) and dies at the first failed fork;
	// the outer shell then counts with builtins only.
	count := `sh -c 'i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done' 2>/dev/null; set -- /proc/[0-9]*; echo $#`
	spec := newSpec("sh", "-c", count)
	spec.Resources.PIDs = 40
	spec.Resources.Timeout = 20 * time.Second
	o := runSpec(t, spec, nil)
	if o.err != nil || o.res.TimedOut {
		t.Fatalf("%+v %v", o.res, o.err)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(o.stdout)); err != nil || n > 40 || n < 20 {
		t.Fatalf("processes: %q (%v), want 20..40", o.stdout, err)
	}
	// Without the limit all 100 start: the check above can fail.
	spec.Resources.PIDs = 0
	if o := mustRun(t, spec, 0); strings.TrimSpace(o.stdout) != "102" {
		t.Fatalf("unlimited: %q", o.stdout)
	}
	// A real fork bomb is contained and the run ends promptly.
	spec = newSpec("sh", "-c", `bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 1`)
	spec.Resources.PIDs = 40
	spec.Resources.Timeout = 20 * time.Second
	o = runSpec(t, spec, nil)
	if o.err != nil || o.res.TimedOut || o.elapsed > 10*time.Second {
		t.Fatalf("fork bomb: %+v %v after %v", o.res, o.err, o.elapsed)
	}
	if left := waitGone(sandboxProcs, 3*time.Second); len(left) > 0 {
		t.Fatalf("left: %d processes", len(left))
	}
}

func TestCPULimitAndCgroupRemoved(t *testing.T) {
	requireRoot(t)
	spec := newSpec("sleep", "5")
	spec.ID = "cputest" + strconv.Itoa(os.Getpid())
	spec.Resources.CPUPercent = 50
	spec.Resources.PIDs = 100
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan sandbox.Result, 1)
	go func() {
		res, _ := New(Options{}).Run(ctx, spec, sandbox.Stdio{})
		done <- res
	}()
	var quota, procs string
	cmdIn := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, d := range agentkernelCgroups() {
			if filepath.Base(d) == cgroupPrefix+spec.ID {
				if b, err := os.ReadFile(filepath.Join(d, "cpu.cfs_quota_us")); err == nil {
					quota = strings.TrimSpace(string(b)) // v1
				} else if b, err := os.ReadFile(filepath.Join(d, "cpu.max")); err == nil {
					quota, _, _ = strings.Cut(strings.TrimSpace(string(b)), " ") // v2: "quota period"
				}
				if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil && len(b) > 0 {
					procs = string(b)
				}
			}
		}
		if quota != "" && sleepIn(procs) {
			cmdIn = true
			break
		}
	}
	cancel()
	<-done
	if quota != "50000" {
		t.Errorf("CPU quota (cpu.cfs_quota_us or cpu.max) = %q, want 50000", quota)
	}
	// The command is in the cgroup. PID 1 is too when it is agentkernel
	// re-executed; the stub PID 1 of a thread-built sandbox stays out on
	// v1 (it only mounts proc and waits).
	if !cmdIn {
		t.Errorf("cgroup.procs = %q, want the command (sleep) among them", procs)
	}
	for _, d := range agentkernelCgroups() {
		if strings.Contains(d, spec.ID) {
			t.Errorf("cgroup left: %s", d)
		}
	}
}

// helperCmd runs the test binary as a one-sandbox agentkernel stand-in.
func helperCmd(t *testing.T, spec *sandbox.Spec) *exec.Cmd {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	return cmd
}

// TestSIGTERM: SIGTERM to agentkernel reaches the command (exit 143), and
// a command that ignores it is killed after the grace period.
func TestSIGTERM(t *testing.T) {
	for _, script := range []string{"echo ready; exec sleep 30", "trap '' TERM; echo ready; sleep 30"} {
		cmd := helperCmd(t, newSpec("sh", "-c", script))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("%q %v", buf, err)
		}
		start := time.Now()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err = cmd.Wait()
		if cmd.ProcessState.ExitCode() != 143 {
			t.Errorf("%q: exit %d (%v), want 143", script, cmd.ProcessState.ExitCode(), err)
		}
		if d := time.Since(start); d > termGrace+2*time.Second {
			t.Errorf("%q: took %v", script, d)
		}
	}
	if left := waitGone(sandboxProcs, 2*time.Second); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
}

// TestSIGINT: an interrupt (Ctrl-C) ends the run as it ends a command in a
// terminal: the whole foreground job gets it, so a shell waiting for its
// child ends at once with 130 instead of after the grace period, and a
// program that handles SIGINT itself still runs its handler. A second
// interrupt ends a command that ignores the first at once. Both ways of
// building a sandbox: on a thread (the command is agentkernel's child) and
// with the re-executed init (PID 1 forwards).
func TestSIGINT(t *testing.T) {
	cases := []struct {
		name, script string
		host         bool // the host's sh (dash on Debian), else busybox's
		sigs         int
		want         int
		out          string
	}{
		{"shell waiting", "echo ready; SLEEP", false, 1, 130, ""},
		{"host shell waiting", "echo ready; SLEEP", true, 1, 130, ""},
		{"exec", "echo ready; exec SLEEP", false, 1, 130, ""},
		{"handler", "trap 'echo cleaned up; exit 3' INT; echo ready; SLEEP", false, 1, 3, "cleaned up\n"},
		{"ignored, twice", "trap '' INT; echo ready; SLEEP", false, 2, 130, ""},
	}
	for _, reexec := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/reexec=%v", c.name, reexec), func(t *testing.T) {
				// A sleep of its own length, to be found running.
				secs := strconv.Itoa(1000 + int(time.Now().UnixNano()/1000%100000))
				spec := newSpec("sh", "-c", strings.ReplaceAll(c.script, "SLEEP", "sleep "+secs))
				if c.host {
					spec.Rootfs = imageHost()
				}
				cmd := helperCmd(t, spec)
				if reexec {
					cmd.Env = append(cmd.Env, "AGENTKERNEL_REEXEC_INIT=1")
				}
				code, out, took := interrupt(t, cmd, "sleep\x00"+secs+"\x00", c.sigs)
				if code != c.want || out != c.out {
					t.Errorf("exit %d, output %q; want %d, %q", code, out, c.want, c.out)
				}
				// The grace period for a command that outlives a single
				// interrupt is seconds; a prompt end is far below this.
				if took > 1500*time.Millisecond {
					t.Errorf("took %v after the interrupt", took)
				}
			})
		}
	}
	if left := waitGone(sandboxProcs, 2*time.Second); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
}

// TestSIGINTTTY: with a pseudo-terminal (-t) an interrupt is the
// terminal's interrupt character typed into it, which signals the job in
// its foreground.
func TestSIGINTTTY(t *testing.T) {
	for _, reexec := range []bool{false, true} {
		t.Run(fmt.Sprintf("reexec=%v", reexec), func(t *testing.T) {
			ptmx, tty, err := pty.Open()
			if err != nil {
				testenv.Missing(t, "no pty: %v", err)
			}
			defer ptmx.Close()
			secs := strconv.Itoa(1000 + int(time.Now().UnixNano()/1000%100000))
			spec := newSpec("sh", "-c", "trap 'echo cleaned up; exit 3' INT; echo ready; sleep "+secs)
			spec.TTY = true
			cmd := helperCmd(t, spec)
			if reexec {
				cmd.Env = append(cmd.Env, "AGENTKERNEL_REEXEC_INIT=1")
			}
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			tty.Close()
			lines := make(chan string, 16)
			go func() {
				defer close(lines)
				var acc strings.Builder
				buf := make([]byte, 256)
				for {
					n, err := ptmx.Read(buf)
					acc.Write(buf[:n])
					lines <- acc.String()
					if err != nil {
						return
					}
				}
			}()
			await := func(want string) string {
				var got string
				timeout := time.After(10 * time.Second)
				for {
					select {
					case s, ok := <-lines:
						if !ok {
							return got
						}
						if got = s; strings.Contains(got, want) {
							return got
						}
					case <-timeout:
						return got
					}
				}
			}
			if got := await("ready"); !strings.Contains(got, "ready") || !waitForProcess("sleep\x00"+secs+"\x00", 10*time.Second) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("not ready: %q", got)
			}
			start := time.Now()
			_ = cmd.Process.Signal(syscall.SIGINT)
			got := await("cleaned up")
			_ = cmd.Wait()
			took := time.Since(start)
			if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(got, "cleaned up") {
				t.Errorf("exit %d, output %q; want 3 and the trap's line", code, got)
			}
			if took > 1500*time.Millisecond {
				t.Errorf("took %v after the interrupt", took)
			}
		})
	}
}

// interrupt starts cmd, waits for its "ready" line and for a process
// whose command line is argv (the foreground command the interrupt is
// for), sends cmd n SIGINTs (100 ms apart) and returns its exit code, what it printed after the
// line, and how long it took to end after the first signal.
func interrupt(t *testing.T, cmd *exec.Cmd, argv string, n int) (int, string, time.Duration) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("%q %v (stderr %q)", buf, err, stderr.String())
	}
	if !waitForProcess(argv, 10*time.Second) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("no process %q started", argv)
	}
	start := time.Now()
	for i := range n {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
	}
	rest, _ := io.ReadAll(out)
	_ = cmd.Wait()
	took := time.Since(start)
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	return cmd.ProcessState.ExitCode(), string(rest), took
}

// waitForProcess waits until a process whose command line is argv runs.
func waitForProcess(argv string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == argv {
				return true
			}
		}
	}
	return false
}

// TestKillParent: agentkernel dying (SIGKILL) takes the sandbox with it.
func TestKillParent(t *testing.T) {
	cmd := helperCmd(t, newSpec("sh", "-c", "echo ready; sleep 30"))
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if left := waitGone(sandboxProcs, 2*time.Second); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
}

// TestTTY: a run's terminal comes from the sandbox's own devpts (tty
// names a /dev/pts/N that exists inside), sized like the caller's, with
// input going through, whether a thread or the re-executed init (the
// rootless way) builds the sandbox.
func TestTTY(t *testing.T) {
	for _, reexec := range []bool{false, true} {
		t.Run(fmt.Sprintf("reexec=%v", reexec), func(t *testing.T) {
			if reexec {
				t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
			}
			testTTY(t)
		})
	}
}

func testTTY(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		testenv.Missing(t, "no pty: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	spec := newSpec("sh", "-c", "[ -t 0 ] && [ -t 1 ] && echo IS-TTY; t=$(tty) && test -c \"$t\" && echo \"NAMED:$t\"; stty size; echo $TERM; read line; echo got:$line")
	spec.TTY = true
	type outcome struct {
		res sandbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := New(Options{}).Run(context.Background(), spec, sandbox.Stdio{Stdin: tty, Stdout: tty, Stderr: tty})
		done <- outcome{res, err}
	}()
	// The pty's master side takes no read deadline: a goroutine reads it
	// (ended by closing it), so that a run which fails at once fails the
	// test instead of leaving it blocked in a read.
	chunks := make(chan []byte, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 1024)
			n, err := ptmx.Read(buf)
			if n > 0 {
				chunks <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	var got strings.Builder
	timeout := time.After(10 * time.Second)
	sent := false
	var out *outcome
read:
	for !strings.Contains(got.String(), "got:") {
		select {
		case b, ok := <-chunks:
			if !ok {
				break read
			}
			got.Write(b)
			if !sent && strings.Contains(got.String(), "xterm") {
				_, _ = ptmx.Write([]byte("hello\r"))
				sent = true
			}
		case o := <-done:
			out = &o
			break read
		case <-timeout:
			break read
		}
	}
	if out == nil {
		select {
		case o := <-done:
			out = &o
		case <-time.After(10 * time.Second):
			t.Fatalf("the run did not end; output %q", got.String())
		}
	}
	// What the command wrote before it ended may still be in the pty.
	drain := time.After(200 * time.Millisecond)
drained:
	for !strings.Contains(got.String(), "got:") {
		select {
		case b, ok := <-chunks:
			if !ok {
				break drained
			}
			got.Write(b)
		case <-drain:
			break drained
		}
	}
	tty.Close()
	if out.err != nil || out.res.ExitCode != 0 {
		t.Fatalf("%v %+v output %q", out.err, out.res, got.String())
	}
	for _, want := range []string{"IS-TTY", "NAMED:/dev/pts/", "33 101", "xterm", "got:hello"} {
		if !strings.Contains(got.String(), want) {
			t.Errorf("missing %q in %q", want, got.String())
		}
	}
}

func TestSeccompProfiles(t *testing.T) {
	for _, p := range []sandbox.SeccompProfile{sandbox.SeccompDefault, sandbox.SeccompNoPtrace, sandbox.SeccompAllowlist} {
		spec := newSpec("sh", "-c", "unshare -U true 2>/dev/null && echo UNSHARED; ls / >/dev/null && cat /etc/hosts | wc -l")
		spec.Security.Seccomp = p
		o := mustRun(t, spec, 0)
		if o.stdout != "1\n" {
			t.Errorf("%s: %q %q", p, o.stdout, o.stderr)
		}
	}
	// Without seccomp and with CAP_SYS_ADMIN kept, unshare works: the
	// check above can fail.
	spec := newSpec("sh", "-c", "unshare -U true && echo UNSHARED")
	spec.Security.Seccomp = sandbox.SeccompUnconfined
	if o := mustRun(t, spec, 0); o.stdout != "UNSHARED\n" {
		t.Errorf("unconfined: %q %q", o.stdout, o.stderr)
	}
}

// TestLandlock: on a writable root Landlock allows what the root's
// writable layer allows, new top-level entries included (as docker's root
// does), and still refuses device nodes, which nothing else would refuse
// before it (EACCES: Landlock; EPERM: the capability check after it); a
// read-only root stays read-only, with /tmp writable.
func TestLandlock(t *testing.T) {
	const script = `mkdir /newdir && echo hi >/newdir/f && touch /newfile && ln -s /newdir /newlink && cat /newlink/f
touch /etc/x /tmp/x && echo OK
mknod /node c 1 3 2>&1 | grep -qi 'permission denied' && echo FENCED
true`
	for _, reexec := range []bool{false, true} {
		t.Run(fmt.Sprintf("reexec=%v", reexec), func(t *testing.T) {
			if reexec {
				t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
			}
			for _, ll := range []bool{false, true} {
				spec := newSpec("sh", "-c", script)
				spec.Security.Landlock = ll
				o := mustRun(t, spec, 0)
				want := "hi\nOK\n"
				if ll && landlockHandled() != 0 {
					want += "FENCED\n"
				}
				if o.stdout != want {
					t.Errorf("writable root, landlock %v: %q, want %q (stderr %q)", ll, o.stdout, want, o.stderr)
				}
			}
			spec := newSpec("sh", "-c", "touch /newfile 2>/dev/null && echo NEW; touch /etc/x 2>/dev/null && echo ETC; touch /tmp/x && echo OK")
			spec.ReadOnlyRoot = true
			if o := mustRun(t, spec, 0); o.stdout != "OK\n" {
				t.Errorf("read-only root: %q %q", o.stdout, o.stderr)
			}
		})
	}
}

// TestAnticipatedCgroup: the cgroup Anticipate starts is the one Run
// uses (limits and all), Run removes it, and forget removes one whose Run
// never comes.
func TestAnticipatedCgroup(t *testing.T) {
	requireRoot(t)
	b := New(Options{})
	cgroupsNamed := func(id string) []string {
		var found []string
		for _, d := range agentkernelCgroups() {
			if filepath.Base(d) == cgroupPrefix+id {
				found = append(found, d)
			}
		}
		return found
	}

	spec := newSpec("sh", "-c", "echo $$")
	spec.Resources.PIDs = 77
	forget := b.Anticipate(spec)
	v, ok := b.early.Load(spec)
	if !ok {
		t.Fatal("Anticipate started nothing for a spec with limits")
	}
	id := v.(*earlyCgroup).id
	<-v.(*earlyCgroup).done
	dirs := cgroupsNamed(id)
	if len(dirs) == 0 {
		t.Fatalf("no cgroup agentkernel-%s after Anticipate", id)
	}
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "pids.max")); err == nil && strings.TrimSpace(string(b)) != "77" {
			t.Errorf("%s/pids.max = %q, want 77", d, b)
		}
	}
	res, err := b.Run(context.Background(), spec, sandbox.Stdio{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	forget() // after Run: nothing to do
	if left := cgroupsNamed(id); len(left) > 0 {
		t.Errorf("cgroups left after the run: %v", left)
	}
	if _, ok := b.early.Load(spec); ok {
		t.Error("Run did not take the anticipated cgroup")
	}

	spec2 := newSpec("true")
	spec2.Resources.MemoryMB = 64
	forget = b.Anticipate(spec2)
	v, _ = b.early.Load(spec2)
	id = v.(*earlyCgroup).id
	forget()
	if left := cgroupsNamed(id); len(left) > 0 {
		t.Errorf("cgroups left after forget: %v", left)
	}

	// No limits, no cgroup to start.
	b.Anticipate(newSpec("true"))()
}

// sleepIn reports whether one of the pids in a cgroup.procs listing runs
// sleep.
func sleepIn(procs string) bool {
	for _, p := range strings.Fields(procs) {
		if b, err := os.ReadFile("/proc/" + p + "/cmdline"); err == nil && strings.HasPrefix(string(b), "sleep\x00") {
			return true
		}
	}
	return false
}

// TestCommandCgroupNamespace: the command's cgroup namespace is rooted at
// its own cgroup, so it sees "/" for every hierarchy and no host path:
// on v1 the exec stage moves itself into the cgroup before it makes the
// namespace.
func TestCommandCgroupNamespace(t *testing.T) {
	requireRoot(t)
	spec := newSpec("cat", "/proc/self/cgroup")
	spec.Resources.PIDs = 100
	spec.Resources.MemoryMB = 256
	spec.Resources.CPUPercent = 100
	out := mustRun(t, spec, 0).stdout
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			t.Fatalf("unexpected /proc/self/cgroup line %q", line)
		}
		limited := f[1] == "" // v2's one hierarchy
		for _, c := range []string{"pids", "memory", "cpu"} {
			limited = limited || strings.Contains(","+f[1]+",", ","+c+",")
		}
		if limited && f[2] != "/" {
			t.Errorf("hierarchy %q: the command sees %q, want / (its own cgroup as the namespace's root)", f[1], f[2])
		}
	}
}
