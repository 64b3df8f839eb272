//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestParallelJobs: jobs with mixed results (the failing one named,
// exit status 1, every job's output in its block), all passing (exit 0),
// -j 1 one at a time, an unknown image or a bad job refused (125) with
// nothing run.
func TestParallelJobs(t *testing.T) {
	a, ref := withRegistry(t)
	r := a.run("parallel", "--job", "ok:"+ref+":echo hi", "--job", "bad:"+ref+":cat /nonexistent", "--job", "marker:"+ref+":cat /etc/agentkernel-test")
	if r.code != 1 || !strings.Contains(r.stderr, "Running 3 jobs in parallel...") || !strings.Contains(r.stderr, "  ok done (") ||
		!strings.Contains(r.stderr, "  bad FAILED (") || !strings.Contains(r.stderr, "Some jobs failed (") ||
		!strings.Contains(r.stdout, "[ok] hi\n") || !strings.Contains(r.stdout, "[marker] registry\n") || !strings.Contains(r.stdout, "[bad] cat: can't open '/nonexistent'") {
		t.Fatalf("mixed results: %v", r)
	}
	r = a.run("parallel", "--job", "a:"+ref+":true", "--job", "b:"+ref+":echo b")
	if r.code != 0 || !strings.Contains(r.stderr, "All jobs passed (") {
		t.Fatalf("all passing: %v", r)
	}
	r = a.run("parallel", "-j", "1", "--job", "s1:"+ref+":sleep 1", "--job", "s2:"+ref+":sleep 1")
	if r.code != 0 || r.took < 2*time.Second {
		t.Fatalf("-j 1 ran the jobs together: %v", r)
	}
	for _, args := range [][]string{
		{"--job", "ok:" + ref + ":echo ran", "--job", "x:127.0.0.1:1/no/such:1:true"},
		{"--job", "ok:" + ref + ":echo ran", "--job", "noimage"},
		{"--job", "ok:" + ref + ":echo ran", "--job", "ok:" + ref + ":echo ran"},
		{"--job", "a/b:" + ref + ":echo ran"},
		{"--job", "ok:" + ref + ":"},
	} {
		r := a.run(append([]string{"parallel"}, args...)...)
		if r.code != 125 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, "agentkernel: ") {
			t.Errorf("parallel %v: %v", args, r)
		}
	}
}

// sleepers counts the processes running "sleep 4711".
func sleepers(t *testing.T) int {
	out, _ := exec.Command("pgrep", "-f", "^sleep 4711$").Output()
	return len(strings.Fields(string(out)))
}

// TestParallelInterrupt: SIGINT stops every job at once and leaves no
// process running.
func TestParallelInterrupt(t *testing.T) {
	a, ref := withRegistry(t)
	a.must("images", "pull", ref)
	before := sleepers(t)
	c := a.cmd(t.Context(), "parallel", "-j", "3", "--job", "a:"+ref+":sleep 4711", "--job", "b:"+ref+":sleep 4711", "--job", "c:"+ref+":sleep 4711")
	var errb strings.Builder
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for sleepers(t) < before+3 {
		if time.Now().After(deadline) {
			c.Process.Signal(syscall.SIGINT)
			c.Wait()
			t.Fatalf("the jobs did not start: exit %d: %s", c.ProcessState.ExitCode(), errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	c.Process.Signal(syscall.SIGINT)
	c.Wait()
	if c.ProcessState.ExitCode() == 0 || time.Since(start) > 10*time.Second {
		t.Fatalf("after SIGINT: exit %d after %v", c.ProcessState.ExitCode(), time.Since(start))
	}
	time.Sleep(200 * time.Millisecond)
	if n := sleepers(t); n > before {
		t.Fatalf("%d job processes left running", n-before)
	}
}

// TestPipelineSteps: files pass from step to step (regular files only:
// a link to a host file and a FIFO left by a step are not followed or
// passed); a failing middle step stops the pipeline, named; the
// directories are removed either way; malformed files are refused with
// FILE:LINE.
func TestPipelineSteps(t *testing.T) {
	a, ref := withRegistry(t)
	tmp := t.TempDir()
	a.env = append(a.env, "TMPDIR="+tmp)
	os.WriteFile(filepath.Join(a.dir, "hostile.sh"), []byte("cp /etc/agentkernel-test /out/marker\nln -s /etc/shadow /out/evil\nmkfifo /out/fifo\nmkdir /out/sub\necho x > /out/sub/f\n"), 0o644)
	write := func(name, body string) string {
		p := filepath.Join(a.dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	good := write("good.toml", `
[[step]]
name = "gen"
image = "`+ref+`"
command = "sh /workspace/hostile.sh"
output = "/out"

[[step]]
name = "mid"
image = "`+ref+`"
command = "cp /in/marker /out/marker2"
input = "/in"
output = "/out"
memory = "64m"

[[step]]
name = "use"
image = "`+ref+`"
command = "ls /in"
input = "/in/"
profile = "restrictive"
`)
	r := a.run("pipeline", good)
	if r.code != 0 || r.stdout != "marker2\n" || !strings.Contains(r.stderr, "  [1/3] gen                  done (") ||
		!strings.Contains(r.stderr, "  [3/3] use                  done (") || !strings.Contains(r.stderr, "  Done (") {
		t.Fatalf("pipeline: %v", r)
	}
	// What the first step passed on: the regular file only.
	passed := write("passed.toml", `
[[step]]
name = "gen"
image = "`+ref+`"
command = "sh /workspace/hostile.sh"
output = "/out"
[[step]]
name = "look"
image = "`+ref+`"
command = "ls -A /in"
input = "/in"
`)
	if r := a.run("pipeline", passed); r.code != 0 || r.stdout != "marker\n" {
		t.Errorf("files passed on: %v", r)
	}
	bad := write("bad.toml", strings.Replace(string(must(os.ReadFile(good))), "cp /in/marker /out/marker2", "cat /in/nonexistent", 1))
	r = a.run("pipeline", bad)
	if r.code != 1 || !strings.Contains(r.stderr, "  [2/3] mid                  FAILED (") || !strings.Contains(r.stderr, "Pipeline failed at step 'mid' (2/3)") ||
		strings.Contains(r.stderr, "[3/3]") {
		t.Fatalf("failing middle step: %v", r)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in TMPDIR: %v", ents)
	}

	for body, want := range map[string]string{
		"[[step]]\nname = \"a\"\nimage = \n":                                                  "bad.toml:3:",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"true\"\ncolour = \"red\"\n":       "bad.toml:5: unknown key",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"true\"\n[[step]]\nname = \"a\"\n": "bad.toml:6: step 2: Duplicate step name: 'a'",
		"# nothing\n": "Pipeline has no steps",
		"[[step]]\nname = \"a/b\"\nimage = \"x\"\ncommand = \"true\"\n":                   "bad.toml:2: step 1: name \"a/b\" must not contain",
		"[[step]]\nname = \"a\"\nimage = \"x\"\n":                                         "step 'a' has no command",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"true\"\ninput = \"rel\"\n":    "bad.toml:5: step 1: input \"rel\" must be an absolute",
		"[[step]]\nname = \"a\"\nimage = \"127.0.0.1:1/no/such:1\"\ncommand = \"true\"\n": "bad.toml:1: step 'a': ",
	} {
		os.WriteFile(bad, []byte(body), 0o644)
		r := a.run("pipeline", bad)
		if r.code != 125 || !strings.Contains(r.stderr, want) || r.stdout != "" {
			t.Errorf("pipeline %q: want %q, got %v", body, want, r)
		}
	}
	if r := a.run("pipeline", filepath.Join(a.dir, "missing.toml")); r.code != 125 {
		t.Errorf("missing file: %v", r)
	}
}

// TestPipelineInterrupt: SIGINT during a step stops it, runs no more
// steps, and leaves no process and no directory behind.
func TestPipelineInterrupt(t *testing.T) {
	a, ref := withRegistry(t)
	a.must("images", "pull", ref)
	tmp := t.TempDir()
	a.env = append(a.env, "TMPDIR="+tmp)
	file := filepath.Join(a.dir, "p.toml")
	os.WriteFile(file, []byte(`
[[step]]
name = "long"
image = "`+ref+`"
command = "sleep 4711"
output = "/out"
[[step]]
name = "after"
image = "`+ref+`"
command = "echo ran"
input = "/in"
`), 0o644)
	before := sleepers(t)
	c := a.cmd(t.Context(), "pipeline", file)
	var out, errb strings.Builder
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for sleepers(t) <= before {
		if time.Now().After(deadline) {
			c.Process.Signal(syscall.SIGINT)
			c.Wait()
			t.Fatalf("the step did not start: %s", errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	c.Process.Signal(syscall.SIGINT)
	c.Wait()
	if c.ProcessState.ExitCode() == 0 || time.Since(start) > 10*time.Second || strings.Contains(out.String(), "ran") ||
		!strings.Contains(errb.String(), "Pipeline failed at step 'long' (1/2)") {
		t.Fatalf("after SIGINT: exit %d after %v: %q %q", c.ProcessState.ExitCode(), time.Since(start), out.String(), errb.String())
	}
	time.Sleep(200 * time.Millisecond)
	if n := sleepers(t); n > before {
		t.Errorf("%d step processes left running", n-before)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in TMPDIR: %v", ents)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
