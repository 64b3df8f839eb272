//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDaemon: with a daemon running, 'agentkernel run' is served from its
// warm pool with the output, stdin, exit status and signals of a direct
// run; status, prewarm and stop work; without a daemon run falls back.
func TestDaemon(t *testing.T) {
	a := newAK(t)
	if r := a.run("daemon", "status"); r.code != 3 || !strings.Contains(r.stdout, "not running") {
		t.Fatalf("status before start: %v", r)
	}
	r := a.run("daemon", "start")
	if r.code != 0 || !strings.Contains(r.stderr, "daemon started") {
		t.Fatalf("start: %v", r)
	}
	t.Cleanup(func() { a.run("daemon", "stop") })
	if r := a.run("daemon", "start"); r.code != 125 || !strings.Contains(r.stderr, "already running") {
		t.Errorf("second start: %v", r)
	}

	// The same command, direct and through the daemon: same stdout,
	// stderr and exit status.
	cases := []struct {
		stdin string
		args  []string
	}{
		{"", []string{"sh", "-c", "echo out; echo err >&2; exit 42"}},
		{"", []string{"sh", "-c", "kill -9 $$"}},
		{"", []string{"no-such-command"}},
		{"", []string{"/etc"}},
		{"piped input\n", []string{"sh", "-c", "tr a-z A-Z"}},
		{"", []string{"sh", "-c", "pwd; id -u; hostname; env | grep -v -e '^HOSTNAME=' -e '^_=' | sort"}},
		{"", []string{"--timeout", "300ms", "--", "sleep", "5"}},
		{"", []string{"-e", "FOO=bar", "-w", "/tmp", "--", "sh", "-c", "echo $FOO; pwd"}},
		// No descriptor of the daemon reaches the command.
		{"", []string{"sh", "-c", "ls /proc/self/fd; cat /proc/self/status | grep -E '^(Cap|Seccomp|NoNewPrivs)'"}},
	}
	for _, c := range cases {
		args := append([]string{"run", "--image", "host"}, c.args...)
		a.stdin = c.stdin
		direct := a.run(append([]string{"run", "--no-daemon", "--image", "host"}, c.args...)...)
		// Twice through the daemon: the first run of a spec creates its
		// pool, the second takes a warm sandbox.
		for i := 0; i < 2; i++ {
			got := a.run(args...)
			if got.stdout != direct.stdout || got.stderr != direct.stderr || got.code != direct.code {
				t.Errorf("%q (daemon run %d):\n daemon: %d %q %q\n direct: %d %q %q", c.args, i, got.code, got.stdout, got.stderr, direct.code, direct.stdout, direct.stderr)
			}
		}
		a.stdin = ""
	}
	r = a.run("daemon", "status", "--json")
	var st struct {
		Running  bool
		PID      int
		Pools    []struct{ Ready int }
		PoolRuns map[string]int `json:"pool_runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 || !st.Running || st.PID == 0 {
		t.Fatalf("status --json: %v %v", r, err)
	}
	t.Logf("pool runs: %v", st.PoolRuns)
	if st.PoolRuns["hit"] < len(cases)-2 {
		t.Errorf("runs from a warm sandbox: %d of %d (%v)", st.PoolRuns["hit"], 2*len(cases), st.PoolRuns)
	}

	// SIGTERM to the CLI reaches the command through the daemon (143),
	// and nothing is left running.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := a.cmd(ctx, "run", "--image", "host", "--", "sh", "-c", "echo ready; exec sleep 30")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The command runs (so the CLI forwards signals) once it says so.
	if line, err := bufio.NewReader(outp).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("waiting for the command: %q %v", line, err)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 || time.Since(start) > 10*time.Second {
		t.Errorf("SIGTERM: exit %d (%v) after %v: %s", code, err, time.Since(start), errb.String())
	}
	// A killed client ends its command too.
	cmd = a.cmd(ctx, "run", "--image", "host", "-p", "permissive", "--", "sh", "-c", "sleep 1; echo survived > survived.txt")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	time.Sleep(2 * time.Second)
	if _, err := os.Stat(a.dir + "/survived.txt"); err == nil {
		t.Errorf("the command of a killed client ran on")
	}
	if r := a.run("run", "--image", "host", "-p", "permissive", "--", "sh", "-c", "echo made > made.txt"); r.code != 0 {
		t.Errorf("permissive run: %v", r)
	} else if b, _ := os.ReadFile(a.dir + "/made.txt"); string(b) != "made\n" {
		t.Errorf("permissive run through the daemon did not write the project: %q", b)
	}

	// prewarm fills the pool of a mode's spec.
	if r := a.run("daemon", "prewarm", "--mode", "claude", "--count", "2"); r.code != 0 {
		t.Errorf("prewarm: %v", r)
	}
	if r := a.run("daemon", "prewarm", "--mode", "nonsense"); r.code == 0 {
		t.Errorf("prewarm of an unknown mode: %v", r)
	}

	// stop: the daemon and its sandboxes are gone; run falls back.
	pid := st.PID
	inits := childInits(pid)
	if r := a.run("daemon", "stop"); r.code != 0 || !strings.Contains(r.stderr, "stopped") {
		t.Fatalf("stop: %v", r)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("daemon pid %d still alive after stop", pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range inits {
		for isInit(p) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if isInit(p) {
			t.Errorf("sandbox init %d left after stop", p)
		}
	}
	for _, f := range []string{"daemon.pid", "run.sock", "api.sock"} {
		if _, err := os.Stat(a.dataDir + "/daemon/" + f); err == nil {
			t.Errorf("%s left after stop", f)
		}
	}
	if r := a.run("run", "--image", "host", "--", "echo", "direct"); r.code != 0 || r.stdout != "direct\n" {
		t.Errorf("run without a daemon: %v", r)
	}
	if r := a.run("daemon", "stop"); r.code != 0 || !strings.Contains(r.stderr, "no agentkernel daemon") {
		t.Errorf("stop when stopped: %v", r)
	}
}

// TestDaemonStale: a daemon of another build of agentkernel (an upgrade
// since it started) is not used: run says so and runs the command itself.
func TestDaemonStale(t *testing.T) {
	a := newAK(t)
	// The other build: both binaries copied elsewhere, agentkernel-full
	// (the daemon) with another modification time.
	dir := t.TempDir()
	other := filepath.Join(dir, "agentkernel")
	for _, name := range []string{"agentkernel", "agentkernel-full"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(binary), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "agentkernel-full"), old, old)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := a.cmd(ctx, "daemon", "start")
	start.Path = other
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("daemon start (other build): %v %s", err, out)
	}
	t.Cleanup(func() { a.run("daemon", "stop") })
	r := a.run("run", "--image", "host", "--", "echo", "still runs")
	if r.code != 0 || r.stdout != "still runs\n" || !strings.Contains(r.stderr, "another build") {
		t.Errorf("run with a stale daemon: %v", r)
	}
	if r := a.run("daemon", "prewarm"); r.code != 125 || !strings.Contains(r.stderr, "restart it") {
		t.Errorf("prewarm with a stale daemon: %v", r)
	}
}

// TestDaemonLogRotation: a log past 10 MiB when the daemon starts is kept
// as daemon.log.1 and a new one begun.
func TestDaemonLogRotation(t *testing.T) {
	a := newAK(t)
	dir := filepath.Join(a.dataDir, "daemon")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte("old log line\n"), (10<<20)/13+1)
	if err := os.WriteFile(filepath.Join(dir, "daemon.log"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	a.must("daemon", "start")
	defer a.run("daemon", "stop")
	if fi, err := os.Stat(filepath.Join(dir, "daemon.log.1")); err != nil || fi.Size() != int64(len(old)) {
		t.Errorf("daemon.log.1: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "daemon.log")); err != nil || fi.Size() >= int64(len(old)) {
		t.Errorf("daemon.log not begun anew: %v %v", fi, err)
	}
}
