//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/envblock"
)

var detachedIDRE = regexp.MustCompile(`^[0-9a-f]{16}\n$`)

// psHas reports whether a process whose command line holds what runs in
// the sandbox (busybox ps, in the sandbox's PID namespace).
func (a *ak) psHas(name, what string) bool {
	a.t.Helper()
	r := a.must("exec", name, "--", "ps")
	return strings.Contains(r.stdout, what)
}

// waitGone polls until nothing in the sandbox runs what.
func (a *ak) waitGone(name, what string) {
	a.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); a.psHas(name, what); {
		if time.Now().After(deadline) {
			a.t.Fatalf("%q still runs in sandbox %s", what, name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// auditHas finds an exec entry of the sandbox whose command holds cmd
// and whose details hold details.
func (a *ak) auditHas(name, cmd, details string) bool {
	b, _ := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"))
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Sandbox, Action, Details string
			Command                  []string
			ExitCode                 *int `json:"exit_code"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Sandbox == name && e.Action == "exec" &&
			strings.Contains(strings.Join(e.Command, " "), cmd) && strings.Contains(e.Details, details) {
			return true
		}
	}
	return false
}

// TestExecDetachedCLI: exec -d prints an id and returns while the
// command runs on, owned by the supervisor; --list, --status, --logs
// (by offset) and --kill; a killed command is gone from the sandbox.
func TestExecDetachedCLI(t *testing.T) {
	a, _ := newSandbox(t, "det")
	r := a.must("exec", "-d", "det", "--", "sh", "-c", "echo one; echo err >&2; sleep 0.3; echo two; sleep 4141 & exec sleep 4242")
	if !detachedIDRE.MatchString(r.stdout) {
		t.Fatalf("exec -d printed %q", r.stdout)
	}
	id := strings.TrimSpace(r.stdout)
	if r.took > 10*time.Second {
		t.Errorf("exec -d waited for the command: %v", r.took)
	}
	// The CLI that started it is gone; the command runs on.
	a.mustSay("one\ntwo\n", "exec", "--logs", id, "det")
	if r := a.must("exec", "--status", id, "det"); r.stdout != "running\n" {
		t.Errorf("status: %v", r)
	}
	if !a.psHas("det", "sleep 4242") || !a.psHas("det", "sleep 4141") {
		t.Errorf("the detached command does not run in the sandbox")
	}
	if r := a.must("exec", "--logs", id, "--offset", "4", "det"); r.stdout != "two\n" {
		t.Errorf("logs from 4: %v", r)
	}
	if r := a.must("exec", "--logs", id, "--stderr", "det"); r.stdout != "err\n" {
		t.Errorf("stderr: %v", r)
	}
	if r := a.run("exec", "--logs", id, "--offset", "9", "det"); r.code != 125 || r.stdout != "" || !strings.Contains(r.stderr, "past the end") {
		t.Errorf("offset past the end: %v", r)
	}
	if r := a.run("exec", "--status", "00000000000000aa", "det"); r.code != 125 || !strings.Contains(r.stderr, "no detached command 00000000000000aa") {
		t.Errorf("unknown id: %v", r)
	}
	r = a.must("exec", "--list", "det")
	if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "running") || !strings.HasPrefix(r.stdout, "ID") {
		t.Errorf("list: %v", r)
	}
	r = a.must("exec", "--kill", id, "--json", "det")
	var d struct {
		ID, Status, Sandbox, Reason string
		ExitCode                    *int `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.ID != id || d.Status != "failed" || d.ExitCode == nil || *d.ExitCode != 137 || d.Reason != "killed" || d.Sandbox != "det" {
		t.Errorf("kill: %v (%v)", r, err)
	}
	a.waitGone("det", "sleep 4242")
	a.waitGone("det", "sleep 4141")
	if !a.auditHas("det", "sleep 4242", "detached: id "+id) {
		t.Errorf("the detached command is not in the audit log")
	}
	// Its files are under the sandbox's directory.
	if b, err := os.ReadFile(filepath.Join(a.dataDir, "sandboxes", "det", "detached", id, "stdout")); err != nil || string(b) != "one\ntwo\n" {
		t.Errorf("stdout on disk: %q %v", b, err)
	}
	if r := a.must("exec", "--status", id, "det"); r.stdout != "failed (exit code 137): killed\n" {
		t.Errorf("status after kill: %v", r)
	}
}

// TestExecFlagsAndTimeout: --env, --workdir, --sudo, --timeout.
func TestExecFlagsAndTimeout(t *testing.T) {
	a, _ := newSandbox(t, "flags")
	if r := a.must("exec", "--env", "K=V", "-e", "L=W", "--workdir", "/tmp", "flags", "--", "sh", "-c", "echo $K$L; pwd"); r.stdout != "VW\n/tmp\n" {
		t.Errorf("env and workdir: %v", r)
	}
	if r := a.must("exec", "-u", "1000:1000", "flags", "--", "id", "-u"); r.stdout != "1000\n" {
		t.Errorf("user: %v", r)
	}
	if r := a.must("exec", "--sudo", "flags", "--", "id", "-u"); r.stdout != "0\n" {
		t.Errorf("sudo: %v", r)
	}
	r := a.run("exec", "--timeout", "1s", "flags", "--", "sh", "-c", "echo started; exec sleep 4343")
	if r.code != 124 || r.stdout != "started\n" || !strings.Contains(r.stderr, "ran past --timeout 1s") || r.took > 15*time.Second {
		t.Errorf("timeout: %v", r)
	}
	a.waitGone("flags", "sleep 4343")
	if !a.auditHas("flags", "sleep 4343", "timed out after 1s") {
		t.Errorf("the timeout is not in the audit log")
	}
	if r := a.must("exec", "--timeout", "30s", "flags", "--", "true"); r.code != 0 {
		t.Errorf("within the timeout: %v", r)
	}
}

// TestExecClientKilled: when exec is killed (-9), the command it
// started is killed in the sandbox, with what it started in the
// background (its process group), and the audit log says so.
func TestExecClientKilled(t *testing.T) {
	a, _ := newSandbox(t, "gone")
	c := a.cmd(context.Background(), "exec", "gone", "--", "sh", "-c", "sleep 4545 & exec sleep 4444")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); !a.psHas("gone", "sleep 4444") || !a.psHas("gone", "sleep 4545"); {
		if time.Now().After(deadline) {
			c.Process.Kill()
			t.Fatal("the command did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	a.waitGone("gone", "sleep 4444")
	a.waitGone("gone", "sleep 4545")
	for deadline := time.Now().Add(10 * time.Second); !a.auditHas("gone", "sleep 4444", "client gone"); {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"))
			t.Fatalf("no \"client gone\" entry in the audit log:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestExecEnvStdin: exec --env-stdin takes the environment from one
// block at the beginning of stdin and leaves the rest, byte for byte, to
// the command; with -t it makes its terminal raw and says so before it
// reads (nothing of the block is echoed); a stdin that is not a block is
// refused with 125 before any command runs.
func TestExecEnvStdin(t *testing.T) {
	a, _ := newSandbox(t, "envin")
	secret := "s3cr3t-" + strings.Repeat("v", 20)
	block, err := envblock.Encode([]string{"S=" + secret, "ML=two\nlines", "K=block"})
	if err != nil {
		t.Fatal(err)
	}
	a.stdin = string(block) + "rest of stdin\x00\n"
	r := a.must("exec", "-i", "--env-stdin", "-e", "K=flag", "-e", "F=1", "envin", "--", "sh", "-c", `printf '%s|%s|%s|%s\n' "$S" "$ML" "$K" "$F"; od -c | head -2`)
	if want := secret + "|two\nlines|block|1\n"; !strings.HasPrefix(r.stdout, want) || !strings.Contains(r.stdout, `r   e   s   t       o   f       s   t   d   i   n  \0  \n`) {
		t.Errorf("env and stdin: %q", r.stdout)
	}
	// Without -i, the command's stdin is empty; so it is when the block
	// is all there is.
	a.stdin = string(block) + "not passed"
	if r := a.must("exec", "--env-stdin", "envin", "--", "sh", "-c", `echo "$K"; wc -c`); r.stdout != "block\n0\n" {
		t.Errorf("without -i: %q", r.stdout)
	}
	a.stdin = string(block)
	if r := a.must("exec", "-i", "--env-stdin", "envin", "--", "sh", "-c", `echo "$K"; wc -c`); r.stdout != "block\n0\n" {
		t.Errorf("empty stdin after the block: %q", r.stdout)
	}
	for name, in := range map[string]string{
		"not a block": "S=x\n",
		"empty":       "",
		"no NUL":      envblock.Magic + "\x00\x00\x00\x03S=x",
		"huge":        envblock.Magic + "\x7f\xff\xff\xff",
	} {
		a.stdin = in
		r := a.run("exec", "-i", "--env-stdin", "envin", "--", "touch", "/tmp/ran")
		if r.code != 125 || !strings.Contains(r.stderr, "exec --env-stdin:") {
			t.Errorf("%s: %v", name, r)
		}
	}
	a.stdin = ""
	if r := a.run("exec", "envin", "--", "test", "-e", "/tmp/ran"); r.code != 1 {
		t.Errorf("a refused block ran the command: %v", r)
	}

	// -t: the block goes after the marker, through a terminal.
	c, master, rd := ptyRun(t, a, 24, 80, "exec", "-it", "--env-stdin", "envin", "--", "sh", "-c", `echo "[$S]"; read x; echo "got $x"`)
	expect(t, rd, envblock.Ready)
	if _, err := master.Write(append(block, "hello\r"...)); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := rd.Read(buf)
			seen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	if code := exitCode(t, c); code != 0 {
		t.Errorf("exec -t: exit %d", code)
	}
	master.Close()
	<-done
	out := seen.String()
	if !strings.Contains(out, "["+secret+"]") || !strings.Contains(out, "got hello") {
		t.Errorf("exec -t output: %q", out)
	}
	if strings.Contains(out, "AKENV") || strings.Count(out, secret) != 1 {
		t.Errorf("the block was echoed: %q", out)
	}
}
