//go:build linux

package e2e

import (
	"bytes"
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

	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// withGVisor is withRegistry for -B gvisor: the runs find runsc where
// scripts/runsc.sh put it, or through AGENTKERNEL_RUNSC. A missing runsc
// fails the test under the suite (strict mode).
func withGVisor(t *testing.T) (*ak, string) {
	t.Helper()
	runsc := os.Getenv(gvisor.RunscEnv)
	if runsc == "" {
		runsc = gvisor.RunscCachePath()
	}
	if _, err := os.Stat(runsc); err != nil {
		testenv.Missing(t, "runsc not found (%v): scripts/runsc.sh builds it, or set %s", err, gvisor.RunscEnv)
	}
	a, ref := withRegistry(t)
	a.env = append(a.env, gvisor.RunscEnv+"="+runsc)
	if d := os.Getenv(gvisor.DebugLogEnv); d != "" {
		a.env = append(a.env, gvisor.DebugLogEnv+"="+d)
	}
	// Pulled once, by a native run; each gvisor run then finds it cached.
	if r := a.run("run", "--image", ref, "--", "true"); r.code != 0 {
		t.Fatalf("pull: %v", r)
	}
	t.Cleanup(func() { checkNoGVisorLeft(t, a) })
	return a, ref
}

// gv runs agentkernel run -B gvisor with the test image, flags before
// "--" and the command after.
func (a *ak) gv(ref string, flags []string, cmd ...string) result {
	a.t.Helper()
	args := append([]string{"run", "-B", "gvisor", "--image", ref}, flags...)
	return a.run(append(append(args, "--"), cmd...)...)
}

// checkNoGVisorLeft fails when a run left anything behind: a runsc
// process, a mount or directory under the data directory, a cgroup.
func checkNoGVisorLeft(t *testing.T, a *ak) {
	t.Helper()
	// runsc's sandbox ends a moment after the command's status is out.
	var left []string
	for i := 0; i < 50; i++ {
		left = gvisorLeftovers(a)
		if len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("gvisor runs left behind:\n%s", strings.Join(left, "\n"))
}

func gvisorLeftovers(a *ak) []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, "runsc") && strings.Contains(cmd, a.dataDir) {
			left = append(left, "process: "+cmd)
		}
	}
	// Every mount namespace's view: the run's own namespace must have
	// gone with it, and the host's never held its mounts.
	seen := map[string]bool{}
	for _, p := range procs {
		pid := filepath.Base(filepath.Dir(p))
		ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		mi, _ := os.ReadFile("/proc/" + pid + "/mountinfo")
		for _, line := range strings.Split(string(mi), "\n") {
			if strings.Contains(line, a.dataDir) {
				left = append(left, "mount (pid "+pid+"): "+line)
			}
		}
	}
	if runs, _ := os.ReadDir(filepath.Join(a.dataDir, "gvisor")); len(runs) > 0 {
		for _, e := range runs {
			if e.IsDir() {
				left = append(left, "directory: "+filepath.Join(a.dataDir, "gvisor", e.Name()))
			}
		}
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/agentkernel-gvisor-*")
	more, _ := filepath.Glob("/sys/fs/cgroup/*/*/*/agentkernel-gvisor-*")
	for _, c := range append(cgs, more...) {
		left = append(left, "cgroup: "+c)
	}
	return left
}

func TestGVisorRun(t *testing.T) {
	a, ref := withGVisor(t)

	t.Run("echo with the profile's network", func(t *testing.T) {
		// moderate's default egress is served (TestGVisorNetwork): the
		// sandbox has eth0 and no fallback is announced.
		r := a.gv(ref, nil, "sh", "-c", "echo hello; cat /proc/net/dev | grep -c eth0")
		if r.code != 0 || r.stdout != "hello\n1\n" {
			t.Fatalf("echo: %v", r)
		}
		if strings.Contains(r.stderr, "loopback only") {
			t.Fatalf("a fallback to loopback was announced: %v", r)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want int
		}{
			{[]string{"true"}, 0},
			{[]string{"sh", "-c", "exit 3"}, 3},
			{[]string{"sh", "-c", "exit 128"}, 128},
			{[]string{"no-such-command"}, 127},
			{[]string{"/no/such/path"}, 127},
			{[]string{"/etc/passwd"}, 126},
			{[]string{"/etc"}, 126},
			{[]string{"sh", "-c", "kill -9 $$"}, 137},
		} {
			r := a.gv(ref, []string{"--network", "none"}, c.args...)
			if r.code != c.want {
				t.Errorf("%v: want exit %d, got %v", c.args, c.want, r)
			}
			// A command that cannot run gets agentkernel's one line, not runsc's.
			if (c.want == 126 || c.want == 127) && (strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "running container")) {
				t.Errorf("%v: want one line on stderr: %v", c.args, r)
			}
		}
	})

	t.Run("stdin", func(t *testing.T) {
		b := *a
		b.stdin = "piped in\nsecond line\n"
		r := b.gv(ref, []string{"--network", "none"}, "sh", "-c", "cat; echo done")
		if r.code != 0 || r.stdout != "piped in\nsecond line\ndone\n" {
			t.Fatalf("stdin: %v", r)
		}
	})

	t.Run("env workdir user", func(t *testing.T) {
		r := a.gv(ref, []string{"--network", "none", "-e", "GREETING=hi there", "-w", "/etc", "-u", "1234:2345"},
			"sh", "-c", `echo "$GREETING"; pwd; id -u; id -g; echo "$HOME"`)
		if r.code != 0 || r.stdout != "hi there\n/etc\n1234\n2345\n/\n" {
			t.Fatalf("env/workdir/user: %v", r)
		}
		r = a.gv(ref, []string{"--network", "none", "-u", "nobody"}, "id", "-u")
		if r.code != 0 || r.stdout != "65534\n" {
			t.Fatalf("user by name from the image's /etc/passwd: %v", r)
		}
	})

	t.Run("gVisor's kernel", func(t *testing.T) {
		host, err := os.ReadFile("/proc/version")
		if err != nil {
			t.Fatal(err)
		}
		r := a.gv(ref, []string{"--network", "none"}, "sh", "-c", "cat /proc/version; dmesg")
		if r.code != 0 || strings.Contains(r.stdout, string(host)) || !strings.Contains(r.stdout, "gVisor") {
			t.Fatalf("the kernel inside must be gVisor's (host: %q): %v", host, r)
		}
		// The same command natively sees the host's kernel.
		r = a.run("run", "--image", ref, "--network", "none", "--", "cat", "/proc/version")
		if r.code != 0 || r.stdout != string(host) {
			t.Fatalf("native control: %v", r)
		}
	})

	t.Run("capabilities and no_new_privs", func(t *testing.T) {
		var spec struct {
			Security struct {
				Capabilities []string `json:"capabilities"`
			} `json:"security"`
		}
		r := a.run("run", "--dry-run", "-B", "gvisor", "--image", ref, "--", "true")
		if err := json.Unmarshal([]byte(r.stdout), &spec); err != nil || len(spec.Security.Capabilities) == 0 {
			t.Fatalf("dry-run: %v %v", err, r)
		}
		var want uint64
		for _, c := range spec.Security.Capabilities {
			n, ok := capNumbers[strings.TrimPrefix(c, "CAP_")]
			if !ok {
				t.Fatalf("capability %s: not in the test's table", c)
			}
			want |= 1 << n
		}
		r = a.gv(ref, []string{"--network", "none"}, "sh", "-c", "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status")
		status := fields(r.stdout)
		for _, k := range []string{"CapEff", "CapPrm", "CapBnd"} {
			got, err := strconv.ParseUint(status[k], 16, 64)
			if r.code != 0 || err != nil || got != want {
				t.Errorf("%s: want %016x (the profile's %v), got %q: %v", k, want, spec.Security.Capabilities, status[k], r)
			}
		}
		if status["NoNewPrivs"] != "1" {
			t.Errorf("NoNewPrivs: %v", r)
		}
		// Another user starts with none, under the same bounding set.
		r = a.gv(ref, []string{"--network", "none", "-u", "1000"}, "grep", "CapEff", "/proc/self/status")
		if got := fields(r.stdout)["CapEff"]; r.code != 0 || got != "0000000000000000" {
			t.Errorf("CapEff of uid 1000: %v", r)
		}
	})

	t.Run("read-only root", func(t *testing.T) {
		r := a.gv(ref, []string{"-p", "restrictive"}, "sh", "-c", "touch /etc/x && echo wrote; touch /tmp/ok && echo tmp")
		if r.code != 0 || strings.Contains(r.stdout, "wrote") || !strings.Contains(r.stdout, "tmp") || !strings.Contains(r.stderr, "Read-only") {
			t.Fatalf("restrictive must refuse a write to / and allow /tmp: %v", r)
		}
		r = a.gv(ref, []string{"--network", "none"}, "sh", "-c", "touch /etc/x && echo wrote")
		if r.code != 0 || r.stdout != "wrote\n" {
			t.Fatalf("moderate's root is writable: %v", r)
		}
	})

	t.Run("writes never reach the store", func(t *testing.T) {
		r := a.gv(ref, []string{"--network", "none"}, "sh", "-c",
			"echo changed > /etc/agentkernel-test && echo new > /gvisor-new && rm /bin/true && cat /etc/agentkernel-test /gvisor-new")
		if r.code != 0 || r.stdout != "changed\nnew\n" {
			t.Fatalf("writes inside: %v", r)
		}
		var markers, trues int
		err := filepath.Walk(a.dataDir, func(p string, info os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			switch info.Name() {
			case "gvisor-new":
				t.Errorf("the sandbox's file reached the host: %s", p)
			case "agentkernel-test":
				markers++
				if b, _ := os.ReadFile(p); string(b) != "registry\n" {
					t.Errorf("%s changed: %q", p, b)
				}
			case "true":
				if strings.Contains(p, "/bin/") {
					trues++
				}
			}
			return nil
		})
		if err != nil || markers == 0 || trues == 0 {
			t.Fatalf("the store's layers: %d markers, %d /bin/true, %v", markers, trues, err)
		}
		r = a.gv(ref, []string{"--network", "none"}, "sh", "-c", "cat /etc/agentkernel-test; test -e /gvisor-new || echo gone; true && echo true-ok")
		if r.code != 0 || r.stdout != "registry\ngone\ntrue-ok\n" {
			t.Fatalf("the next run must see the image as it was: %v", r)
		}
	})

	t.Run("loopback only", func(t *testing.T) {
		r := a.gv(ref, []string{"--network", "none"}, "cat", "/proc/net/dev")
		var ifaces []string
		for _, line := range strings.Split(r.stdout, "\n") {
			if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
				ifaces = append(ifaces, strings.TrimSpace(name))
			}
		}
		if r.code != 0 || len(ifaces) != 1 || ifaces[0] != "lo" {
			t.Fatalf("want only lo, got %v: %v", ifaces, r)
		}
	})

	t.Run("volumes", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "in"), []byte("from the host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ro := t.TempDir()
		r := a.gv(ref, []string{"--network", "none", "-v", dir + ":/data", "-v", ro + ":/ro:ro"}, "sh", "-c",
			"cat /data/in; echo out > /data/out; touch /ro/x 2>/dev/null && echo ro-written; true")
		if r.code != 0 || r.stdout != "from the host\n" {
			t.Fatalf("-v: %v", r)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "out")); err != nil || string(b) != "out\n" {
			t.Fatalf("a write to a read-write volume must reach the host: %q %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(ro, "x")); err == nil {
			t.Fatal("a write to a read-only volume reached the host")
		}
		// moderate's /workspace: the current directory, copy-on-write.
		if err := os.WriteFile(filepath.Join(a.dir, "proj"), []byte("project\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r = a.gv(ref, []string{"--network", "none"}, "sh", "-c", "pwd; cat proj; echo scribble > proj; echo more > added; cat proj")
		if r.code != 0 || r.stdout != "/workspace\nproject\nscribble\n" {
			t.Fatalf("/workspace: %v", r)
		}
		if b, _ := os.ReadFile(filepath.Join(a.dir, "proj")); string(b) != "project\n" {
			t.Fatalf("copy-on-write /workspace changed the host's file: %q", b)
		}
		if _, err := os.Stat(filepath.Join(a.dir, "added")); err == nil {
			t.Fatal("copy-on-write /workspace added a file on the host")
		}
	})

	t.Run("timeout", func(t *testing.T) {
		r := a.gv(ref, []string{"--network", "none", "--timeout", "2s"}, "sleep", "60")
		if r.code != 124 || r.took > 20*time.Second {
			t.Fatalf("--timeout: %v", r)
		}
	})

	t.Run("not yet", func(t *testing.T) {
		for _, c := range []struct {
			flags []string
			want  string
		}{
			{[]string{"--image", "host", "--network", "none"}, "host image"},
		} {
			r := a.gv(ref, c.flags, "true")
			if r.code != 125 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%v: want exit 125 about %q: %v", c.flags, c.want, r)
			}
		}
	})
}

// TestGVisorSignals: a run's SIGTERM reaches the command (143), and a
// run killed by its context (the CLI's SIGKILL here, Backend.Run's ctx
// in the package's tests) leaves nothing behind once runsc ends.
func TestGVisorSignals(t *testing.T) {
	a, ref := withGVisor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := a.cmd(ctx, "run", "-B", "gvisor", "--image", ref, "--network", "none", "--", "sh", "-c", "echo up; sleep 60")
	out := &strings.Builder{}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = pw, out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	buf := make([]byte, 3)
	if _, err := pr.Read(buf); err != nil || string(buf) != "up\n" {
		t.Fatalf("the command did not start: %q %v; stderr %s", buf, err, out)
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = c.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 {
		t.Fatalf("SIGTERM: want exit 143, got %v; stderr %s", err, out)
	}
}

// TestGVisorAttack tries, from inside, what a sandbox must not do: see
// the host's processes, reach the host kernel's sysrq, mount. The
// control is a host process the sandbox must not see.
func TestGVisorAttack(t *testing.T) {
	a, ref := withGVisor(t)
	marker := "4242.4242"
	host := exec.Command("sleep", marker)
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { host.Process.Kill(); host.Wait() }()
	// Control: the host's /proc shows it (once it has exec'd sleep).
	var b []byte
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err = os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", host.Process.Pid))
		if err == nil && strings.Contains(string(b), marker) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !strings.Contains(string(b), marker) {
		t.Fatalf("control: the host process is not visible on the host: %q %v", b, err)
	}
	for _, profile := range []string{"moderate", "permissive"} {
		r := a.gv(ref, []string{"-p", profile, "--network", "none"}, "sh", "-c", fmt.Sprintf(
			"ls /proc | grep -c '^[0-9]'; test -e /proc/%d && echo SEES-HOST-PID; c=$(cat /proc/[0-9]*/cmdline | tr '\\0' ' '); case \"$c\" in *%s*) echo SEES-HOST-PROCESS;; esac; "+
				"echo h > /proc/sysrq-trigger && echo SYSRQ; mount -t tmpfs none /mnt && echo MOUNTED; mount -t proc proc /mnt && echo MOUNTED-PROC; "+
				"true", host.Process.Pid, quoteSplit(marker)))
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		n, _ := strconv.Atoi(lines[0])
		if r.code != 0 || n == 0 || n > 8 {
			t.Errorf("%s: the sandbox's /proc must list its own few processes: %v", profile, r)
		}
		for _, bad := range []string{"SEES-HOST-PID", "SEES-HOST-PROCESS", "SYSRQ", "MOUNTED", "MOUNTED-PROC"} {
			for _, l := range lines {
				if l == bad {
					t.Errorf("%s: %s: %v", profile, bad, r)
				}
			}
		}
	}
}

// quoteSplit writes s for sh so that the script's text does not contain
// s itself ("ab" → a"b"), while the shell reads it as s.
func quoteSplit(s string) string {
	return s[:1] + `"` + s[1:] + `"`
}

// TestGVisorOutputFile: output to a regular file (a shell's > log) lands
// where the file's offset is, after what the file held and before what
// is written after the run, never over it.
func TestGVisorOutputFile(t *testing.T) {
	a, ref := withGVisor(t)
	p := filepath.Join(t.TempDir(), "log")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("before\n"); err != nil {
		t.Fatal(err)
	}
	c := a.cmd(context.Background(), "run", "-B", "gvisor", "--image", ref, "--network", "none", "--", "sh", "-c", "echo out; echo err >&2")
	c.Stdout, c.Stderr = f, f
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("after\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "before\nout\nerr\nafter\n" {
		t.Fatalf("the log: %q", b)
	}
}

// TestGVisorTTY: -t gives the command a terminal of the caller's size,
// and its output and status come back.
func TestGVisorTTY(t *testing.T) {
	a, ref := withGVisor(t)
	c := a.cmd(context.Background(), "run", "-B", "gvisor", "-t", "--image", ref, "--network", "none", "--",
		"sh", "-c", "test -t 0 && test -t 1 && echo tty-ok; echo \"$TERM\"; stty size; exit 5")
	master, err := pty.StartWithSize(c, &pty.Winsize{Rows: 31, Cols: 97})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	var got bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&got, master); close(done) }()
	err = c.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 {
		t.Fatalf("want exit 5, got %v; output %q", err, got.String())
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the terminal's output did not end")
	}
	out := strings.ReplaceAll(got.String(), "\r", "")
	for _, want := range []string{"tty-ok\n", "xterm\n", "31 97\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the terminal's output %q", want, out)
		}
	}

	// What is typed reaches the command.
	c = a.cmd(context.Background(), "run", "-B", "gvisor", "-t", "--image", ref, "--network", "none", "--",
		"sh", "-c", "echo ready; read line; echo \"got:$line\"")
	master2, err := pty.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	defer master2.Close()
	var typed bytes.Buffer
	done2 := make(chan struct{})
	go func() {
		b := make([]byte, 256)
		sent := false
		for {
			n, err := master2.Read(b)
			typed.Write(b[:n])
			if !sent && strings.Contains(typed.String(), "ready") {
				master2.Write([]byte("hello gvisor\r"))
				sent = true
			}
			if err != nil {
				close(done2)
				return
			}
		}
	}()
	if err := c.Wait(); err != nil {
		t.Fatalf("typed: %v", err)
	}
	select {
	case <-done2:
	case <-time.After(5 * time.Second):
		t.Fatal("the terminal's output did not end")
	}
	if !strings.Contains(typed.String(), "got:hello gvisor") {
		t.Fatalf("typed input did not reach the command: %q", typed.String())
	}
}

// TestGVisorRootless: an unprivileged caller is refused at once, before
// any image is pulled (the registry here does not exist).
func TestGVisorRootless(t *testing.T) {
	a, _ := rootlessAK(t)
	r := a.run("run", "-B", "gvisor", "--image", "127.0.0.1:1/none/such:1", "--network", "none", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "root only") || !strings.Contains(r.stderr, "-B native") || strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Fatalf("want exit 125 saying root only, before any pull: %v", r)
	}
}

// TestGVisorKilledThenGC: agentkernel killed during a gvisor run leaves
// its run to 'agentkernel gc', which ends the sandbox and removes the
// rest (the leftover check runs at the end).
func TestGVisorKilledThenGC(t *testing.T) {
	a, ref := withGVisor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := a.cmd(ctx, "run", "-B", "gvisor", "--image", ref, "--network", "none", "--", "sh", "-c", "echo up; sleep 60")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	c.Stdout = pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	buf := make([]byte, 3)
	if _, err := pr.Read(buf); err != nil || string(buf) != "up\n" {
		t.Fatalf("the command did not start: %q %v", buf, err)
	}
	// A gc while the run is alive leaves it alone.
	if r := a.run("gc"); r.code != 0 || strings.Contains(r.stdout, "gvisor") {
		t.Fatalf("gc during a run: %v", r)
	}
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	if len(gvisorLeftovers(a)) == 0 {
		t.Fatal("a killed run left nothing: the check sees nothing")
	}
	r := a.run("gc")
	if r.code != 0 || !strings.Contains(r.stdout, filepath.Join(a.dataDir, "gvisor")) {
		t.Fatalf("gc after the kill: %v", r)
	}
}

// TestGVisorRelativeDataDir: a relative --data-dir works (runsc is
// given absolute paths).
func TestGVisorRelativeDataDir(t *testing.T) {
	a, ref := withGVisor(t)
	rel := *a
	rel.dir, rel.dataDir = filepath.Dir(a.dataDir), filepath.Base(a.dataDir)
	if r := rel.gv(ref, []string{"-p", "restrictive"}, "echo", "hi"); r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("a run with --data-dir %s from %s: %v", rel.dataDir, rel.dir, r)
	}
}

// fields reads "Key:\tvalue" lines.
func fields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// capNumbers are capability.h's numbers.
var capNumbers = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4,
	"KILL": 5, "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9,
	"NET_BIND_SERVICE": 10, "NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13,
	"IPC_LOCK": 14, "IPC_OWNER": 15, "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18,
	"SYS_PTRACE": 19, "SYS_PACCT": 20, "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23,
	"SYS_RESOURCE": 24, "SYS_TIME": 25, "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28,
	"AUDIT_WRITE": 29, "AUDIT_CONTROL": 30, "SETFCAP": 31,
}
