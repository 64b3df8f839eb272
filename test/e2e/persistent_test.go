//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// auditEntry is the part of `audit --json` the tests read.
type auditEntry struct {
	Sandbox  string   `json:"sandbox"`
	Action   string   `json:"action"`
	Command  []string `json:"command"`
	ExitCode *int     `json:"exit_code"`
	Who      string   `json:"who"`
	Error    string   `json:"error"`
	Details  string   `json:"details"`
}

func (a *ak) audit(args ...string) []auditEntry {
	a.t.Helper()
	var es []auditEntry
	r := a.must(append([]string{"audit", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(r.stdout), &es); err != nil {
		a.t.Fatalf("audit: %v\n%s", err, r.stdout)
	}
	return es
}

// TestSandboxBranchDirAliasesAudit: `create --branch --dir` names the
// sandbox after the project and branch and reuses it; the old flat names
// work; every lifecycle step and exec lands in the audit log; stats
// reports a running sandbox.
func TestSandboxBranchDirAliasesAudit(t *testing.T) {
	a, ref := withRegistry(t)
	project := filepath.Join(t.TempDir(), "my.app")
	os.MkdirAll(filepath.Join(project, ".git"), 0o755)
	os.WriteFile(filepath.Join(project, ".git", "HEAD"), []byte("ref: refs/heads/feature/Login__x\n"), 0o644)
	os.WriteFile(filepath.Join(project, "marker.txt"), []byte("project file\n"), 0o644)
	os.MkdirAll(filepath.Join(project, "sub"), 0o755)
	const want = "my-app-feature-Login-x"

	// Flat alias, the project given with --dir.
	r := a.must("create", "--branch", "--dir", project, "--image", ref, "--label", "k=v")
	if strings.TrimSpace(r.stdout) != want {
		t.Fatalf("--branch name: %v", r)
	}
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", want) })
	// Reused, and started, the second time (from a subdirectory).
	r = a.must("sandbox", "create", "--branch", "--dir", filepath.Join(project, "sub"), "--image", ref, "--start")
	if strings.TrimSpace(r.stdout) != want || !strings.Contains(r.stderr, "reusing") {
		t.Fatalf("--branch reuse: %v", r)
	}
	if i := a.info(want); i.Status != "running" || i.Labels["k"] != "v" {
		t.Fatalf("reused sandbox: %+v", i)
	}
	if r := a.run("sandbox", "create", want, "--image", ref); r.code != 125 || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("create of an existing name: %v", r)
	}
	// --dir is the project mounted at /workspace (moderate: copy-on-write).
	if r := a.must("exec", want, "--", "sh", "-c", "cat /workspace/sub/../marker.txt; echo changed > /workspace/marker.txt"); r.stdout != "project file\n" {
		t.Errorf("--dir mount: %v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "marker.txt")); string(b) != "project file\n" {
		t.Errorf("copy-on-write leaked to the host: %q", b)
	}
	a.run("exec", want, "--", "sh", "-c", "exit 7")
	a.run("exec", want, "--", "no-such-command")
	if r := a.must("list"); !strings.Contains(r.stdout, want) {
		t.Errorf("flat list: %v", r)
	}

	// stats: one running sandbox with processes and memory, host totals.
	var st struct {
		Sandboxes []struct {
			Name        string `json:"name"`
			Status      string `json:"status"`
			Pids        int    `json:"pids"`
			MemoryBytes int64  `json:"memory_bytes"`
		} `json:"sandboxes"`
		Host struct {
			CPUs             int   `json:"cpus"`
			MemoryTotalBytes int64 `json:"memory_total_bytes"`
			Running          int   `json:"running"`
		} `json:"host"`
	}
	r = a.must("stats", want, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Sandboxes) != 1 {
		t.Fatalf("stats: %v %v", err, r)
	}
	if s := st.Sandboxes[0]; s.Status != "running" || s.Pids < 1 || s.MemoryBytes <= 0 || st.Host.CPUs < 1 || st.Host.MemoryTotalBytes <= 0 || st.Host.Running != 1 {
		t.Errorf("stats: %s", r.stdout)
	}
	if r := a.must("stats"); !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "host:") {
		t.Errorf("stats table: %v", r)
	}

	a.must("stop", want)
	a.must("remove", want)
	if r := a.run("remove", want); r.code != 125 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("remove twice: %v", r)
	}

	// The audit log: create, start (by the reusing create), the execs
	// with their exit codes, stop, remove.
	es := a.audit("--sandbox", want)
	var got []string
	for _, e := range es {
		s := e.Action
		if e.ExitCode != nil {
			s += ":" + strings.Join(e.Command, " ") + "=" + itoa(*e.ExitCode)
		}
		got = append(got, s)
		if !strings.Contains(e.Who, "via cli") || !strings.Contains(e.Who, "uid=") {
			t.Errorf("who: %+v", e)
		}
	}
	wantSeq := "create start exec:sh -c cat /workspace/sub/../marker.txt; echo changed > /workspace/marker.txt=0 exec:sh -c exit 7=7 exec:no-such-command=127 stop remove"
	if strings.Join(got, " ") != wantSeq {
		t.Errorf("audit:\n got %s\nwant %s", strings.Join(got, " "), wantSeq)
	}
	if es := a.audit("--last", "1"); len(es) != 1 || es[0].Action != "remove" {
		t.Errorf("audit --last 1: %+v", es)
	}
	if r := a.must("audit", "--sandbox", want); !strings.Contains(r.stdout, "exit 7") || !strings.Contains(r.stdout, "127") {
		t.Errorf("audit table: %v", r)
	}
	// Hidden aliases stay out of the help.
	if r := a.must("--help"); strings.Contains(r.stdout, "\n  create") || !strings.Contains(r.stdout, "attach") {
		t.Errorf("help: %s", r.stdout)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// ptyRun starts agentkernel on a new terminal of rows×cols and returns
// the terminal's master and a line reader over it.
func ptyRun(t *testing.T, a *ak, rows, cols uint16, args ...string) (*exec.Cmd, *os.File, *bufio.Reader) {
	t.Helper()
	c := a.cmd(context.Background(), args...)
	master, err := pty.StartWithSize(c, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		master.Close()
		if c.ProcessState == nil {
			c.Process.Kill()
			c.Wait()
		}
	})
	return c, master, bufio.NewReader(master)
}

// expect reads from r until want appears (or 10 s pass).
func expect(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		var sb strings.Builder
		for {
			b, err := r.ReadByte()
			if err != nil {
				got <- sb.String() + " (" + err.Error() + ")"
				return
			}
			sb.WriteByte(b)
			if strings.Contains(sb.String(), want) {
				got <- ""
				return
			}
		}
	}()
	select {
	case s := <-got:
		if s != "" {
			t.Fatalf("waiting for %q, got %q", want, s)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %q", want)
	}
}

func exitCode(t *testing.T, c *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(10 * time.Second):
		t.Fatal("agentkernel did not exit")
	}
	return -1
}

// TestSandboxAttachAndResize: attach gives an interactive shell on a
// terminal; exec -t follows the window's size (SIGWINCH).
func TestSandboxAttachAndResize(t *testing.T) {
	a, _ := newSandbox(t, "tty")
	c, master, r := ptyRun(t, a, 30, 90, "attach", "tty")
	master.Write([]byte("tty -s && echo is-a-tty; echo sum-$((40+2)); stty size\r"))
	expect(t, r, "is-a-tty")
	expect(t, r, "sum-42")
	expect(t, r, "30 90")
	master.Write([]byte("exit 3\r"))
	if code := exitCode(t, c); code != 3 {
		t.Errorf("attach exit: %d", code)
	}

	c, master, r = ptyRun(t, a, 24, 80, "exec", "-it", "tty", "--", "sh", "-c", "stty size; while read x; do stty size; done")
	expect(t, r, "24 80")
	if err := pty.Setsize(master, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	// The resize reaches agentkernel as SIGWINCH; ask until it shows.
	deadline := time.Now().Add(5 * time.Second)
	found := make(chan bool, 1)
	go func() {
		var sb strings.Builder
		for {
			b, err := r.ReadByte()
			if err != nil {
				found <- false
				return
			}
			sb.WriteByte(b)
			if strings.Contains(sb.String(), "50 132") {
				found <- true
				return
			}
		}
	}()
	ok := false
	for !ok && time.Now().Before(deadline) {
		master.Write([]byte("\r"))
		select {
		case ok = <-found:
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !ok {
		t.Fatal("the sandbox's terminal did not follow the resize")
	}
	master.Write([]byte{4}) // ^D: read fails, the loop ends
	if code := exitCode(t, c); code != 0 {
		t.Errorf("exec -t exit: %d", code)
	}
}
