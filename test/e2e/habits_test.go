//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestRunKeepsNamedSandbox: docker's habits on run: --name keeps the
// run's sandbox as a persistent one, still running, with the command's
// exit status; -d starts one without a command (--ttl, -m recorded);
// --branch creates, then reuses, the branch's sandbox; --rm and
// --fast=false are plain runs. Then logs, several names to stop, start
// and rm (each reported, the others done when one fails), ps, and exec
// without a command, through the agentkernel binary.
func TestRunKeepsNamedSandbox(t *testing.T) {
	a, ref := withRegistry(t)
	t.Cleanup(func() { a.run("rm", "-f", "dev", "dev2", "box", "proj-main") })

	r := a.run("run", "--name", "dev", "--image", ref, "--", "sh", "-c", "echo hi; echo kept > /tmp/f")
	if r.code != 0 || r.stdout != "hi\n" || !strings.Contains(r.stderr, "sandbox dev keeps running") {
		t.Fatalf("run --name: %v", r)
	}
	if i := a.info("dev"); i.Status != "running" {
		t.Fatalf("dev after run --name: %+v", i)
	}
	if r := a.must("exec", "dev", "--", "cat", "/tmp/f"); r.stdout != "kept\n" {
		t.Errorf("the kept sandbox lost the run's file: %v", r)
	}
	// stdin reaches the command, and its exit status is run's.
	a.stdin = "piped\n"
	r = a.run("run", "--name", "dev2", "--image", ref, "--", "sh", "-c", "cat; exit 3")
	a.stdin = ""
	if r.code != 3 || r.stdout != "piped\n" {
		t.Errorf("run --name exit status and stdin: %v", r)
	}
	if r := a.run("run", "--name", "dev", "--image", ref, "--", "true"); r.code != 125 || !strings.Contains(r.stderr, `sandbox "dev" already exists`) ||
		!strings.Contains(r.stderr, "agentkernel exec dev -- COMMAND") {
		t.Errorf("run --name of an existing sandbox: %v", r)
	}

	// -d: started, no command, the name printed; --ttl and -m recorded.
	r = a.must("run", "-d", "--name", "box", "--image", ref, "--ttl", "2h", "-m", "48m")
	if r.stdout != "box\n" {
		t.Errorf("run -d --name box: %v", r)
	}
	var box struct {
		Status    string  `json:"status"`
		ExpiresAt *string `json:"expires_at"`
		Resources struct {
			MemoryMB int64 `json:"memory_mb"`
		} `json:"resources"`
	}
	if err := json.Unmarshal([]byte(a.must("sandbox", "info", "--json", "box").stdout), &box); err != nil ||
		box.Status != "running" || box.ExpiresAt == nil || box.Resources.MemoryMB != 48 {
		t.Errorf("box: %v %+v", err, box)
	}
	r = a.must("run", "-d", "--image", ref)
	anon := strings.TrimSpace(r.stdout)
	if !regexp.MustCompile(`^sandbox-[0-9a-f]{8}$`).MatchString(anon) {
		t.Errorf("run -d without --name: %v", r)
	}
	a.must("rm", "-f", anon)
	if r := a.run("run", "-d", "--image", ref, "--", "sleep", "5"); r.code != 125 || !strings.Contains(r.stderr, "run -d with a command") {
		t.Errorf("run -d with a command: %v", r)
	}

	// --branch: <project>-<branch>, created then reused.
	project := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(project, ".git"), 0o755)
	os.WriteFile(filepath.Join(project, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	dir := a.dir
	a.dir = project
	r = a.run("run", "--branch", "--image", ref, "--", "sh", "-c", "echo one > /tmp/b")
	if r.code != 0 || !strings.Contains(r.stderr, "sandbox proj-main keeps running") {
		t.Errorf("run --branch: %v", r)
	}
	r = a.run("run", "--branch", "--image", ref, "--", "cat", "/tmp/b")
	if r.code != 0 || r.stdout != "one\n" || !strings.Contains(r.stderr, "existing sandbox proj-main") {
		t.Errorf("run --branch again: %v", r)
	}
	a.dir = dir

	// Plain runs with docker's --rm and upstream's --fast=false.
	if r := a.run("run", "--rm", "--fast=false", "--image", ref, "--", "echo", "plain"); r.code != 0 || r.stdout != "plain\n" {
		t.Errorf("run --rm --fast=false: %v", r)
	}

	// logs: the sandbox's recorded actions.
	r = a.must("logs", "dev")
	if !strings.Contains(r.stdout, "exec") || !strings.Contains(r.stdout, "cat /tmp/f") || !strings.Contains(r.stderr, "output is not recorded") {
		t.Errorf("logs dev: %v", r)
	}
	var es []auditEntry
	if err := json.Unmarshal([]byte(a.must("logs", "dev", "--json", "--tail", "1").stdout), &es); err != nil || len(es) != 1 || es[0].Sandbox != "dev" {
		t.Errorf("logs --json --tail 1: %v %+v", err, es)
	}

	// Several names: each reported, the others done.
	r = a.run("stop", "dev", "nope", "box")
	if r.code != 125 || r.stdout != "dev\nbox\n" || !strings.Contains(r.stderr, `sandbox "nope" not found`) {
		t.Errorf("stop dev nope box: %v", r)
	}
	if d, b := a.info("dev"), a.info("box"); d.Status != "stopped" || b.Status != "stopped" {
		t.Errorf("after stop: %+v %+v", d, b)
	}
	if r := a.run("ps"); r.code != 0 || psNames(r) != "dev2 proj-main" {
		t.Errorf("ps: %v", r)
	}
	if r := a.run("ps", "-a"); r.code != 0 || psNames(r) != "box dev dev2 proj-main" {
		t.Errorf("ps -a: %v", r)
	}
	if r := a.run("start", "dev", "box"); r.code != 0 || r.stdout != "dev\nbox\n" {
		t.Errorf("start dev box: %v", r)
	}
	if r := a.run("ps"); psNames(r) != "box dev dev2 proj-main" {
		t.Errorf("ps after start: %v", r)
	}
	// exec without a command, read by the agentkernel binary itself.
	if r := a.run("exec", "dev"); r.code != 125 || !strings.Contains(r.stderr, "no COMMAND given") || !strings.Contains(r.stderr, "usage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]") {
		t.Errorf("exec dev: %v", r)
	}
	r = a.run("rm", "-f", "dev", "nope", "box", "dev2", "proj-main")
	if r.code != 125 || r.stdout != "dev\nbox\ndev2\nproj-main\n" || !strings.Contains(r.stderr, `sandbox "nope" not found`) {
		t.Errorf("rm -f dev nope box dev2 proj-main: %v", r)
	}
	if r := a.must("ps", "-a"); psNames(r) != "" {
		t.Errorf("sandboxes left: %v", r)
	}
}

// psNames is the NAME column of ps's table, sorted, space-separated.
func psNames(r result) string {
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var names []string
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// TestRunFast: upstream's -F/--fast (the default) takes the daemon's
// warm pool when a daemon runs; --fast=false builds the sandbox here, as
// --no-daemon does, with the same output.
func TestRunFast(t *testing.T) {
	a := newAK(t)
	if r := a.run("daemon", "start"); r.code != 0 {
		t.Fatalf("daemon start: %v", r)
	}
	t.Cleanup(func() { a.run("daemon", "stop") })
	poolRuns := func() int {
		t.Helper()
		var st struct {
			PoolRuns map[string]int `json:"pool_runs"`
		}
		r := a.must("daemon", "status", "--json")
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("daemon status --json: %v %v", err, r)
		}
		n := 0
		for _, v := range st.PoolRuns {
			n += v
		}
		return n
	}
	before := poolRuns()
	for _, args := range [][]string{{"-F"}, {"--fast"}, {}} {
		r := a.run(append(append([]string{"run", "--image", "host"}, args...), "--", "sh", "-c", "echo fast; exit 4")...)
		if r.code != 4 || r.stdout != "fast\n" {
			t.Errorf("run %q: %v", args, r)
		}
	}
	if n := poolRuns(); n != before+3 {
		t.Errorf("pool runs after three --fast runs: %d, want %d", n, before+3)
	}
	before = poolRuns()
	for _, args := range [][]string{{"--fast=false"}, {"-F=false"}} {
		r := a.run(append(append([]string{"run", "--image", "host"}, args...), "--", "sh", "-c", "echo slow; exit 5")...)
		if r.code != 5 || r.stdout != "slow\n" {
			t.Errorf("run %q: %v", args, r)
		}
	}
	if n := poolRuns(); n != before {
		t.Errorf("--fast=false runs went to the daemon: pool runs %d, want %d", n, before)
	}
	if r := a.run("run", "--fast", "--keep", "--image", "host", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "cannot use --fast with --keep") {
		t.Errorf("--fast --keep: %v", r)
	}
}
