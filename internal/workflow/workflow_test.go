package workflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestParseJobSpec(t *testing.T) {
	valid := func(s string) bool { return !strings.ContainsAny(s, " ") && !strings.HasPrefix(s, ":") }
	for in, want := range map[string]string{
		"lint:node:npx eslint .":                "lint|node:latest|npx eslint .",
		"test:python:3.12:pytest -q":            "test|python:3.12|pytest -q",
		"r:localhost:5000/tools/bb:1:sh -c a:b": "r|localhost:5000/tools/bb:1|sh -c a:b",
		"r:localhost:5000/tools/bb:echo":        "r|localhost:5000/tools/bb:latest|echo",
		"d:alpine@sha256:abc:true":              "d|alpine@sha256:abc|true",
		"w:alpine:3.20:  echo   spaced  ":       "w|alpine:3.20|echo spaced",
	} {
		j, err := ParseJobSpec(in, valid)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := j.Name + "|" + j.Image + "|" + strings.Join(j.Args, " "); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{"", "name", "n:", "n:img:", "a/b:img:x", "..:img:x", ":img:x", "n::x"} {
		if _, err := ParseJobSpec(in, valid); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestParsePipelineLines(t *testing.T) {
	good := "# ci\n[[step]]\nname = \"a\"\nimage = \"alpine\"\ncommand = \"echo  hi\"\noutput = \"/out\"\n\n[[step]]\nname = \"b\"\nimage = \"alpine\"\ncommand = \"cat /in/x\"\ninput = \"/in\"\ntimeout = \"5s\"\ncpus = 2\n"
	steps, err := ParsePipeline("p.toml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Line != 2 || steps[1].Line != 8 || strings.Join(steps[0].Args, ",") != "echo,hi" || steps[1].TimeoutD != 5*time.Second || steps[1].CPUs != 2 {
		t.Fatalf("steps: %+v", steps)
	}
	for body, want := range map[string]string{
		"[[step]]\nname = \"a\"\nimage = \n": "p.toml:3: ",
		"[[step]]\nname = 5\n":               "p.toml:2: ",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"y\"\n\n[[step]]\nname = \"b\"\nimage = \"x\"\ncommand = \"y\"\nbogus = 1\n": "p.toml:10: unknown key \"step.bogus\"",
		"[other]\nx = 1\n": "p.toml:1: unknown key",
		"":                 "p.toml: Pipeline has no steps",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"y\"\n[[step]]\nimage = \"x\"\n  name = \"a\"\n": "p.toml:7: step 2: Duplicate step name: 'a'",
		"[[step]]\nname = \"\"\n":                                                                    "p.toml:2: step 1: a name must not be empty",
		"[[step]]\nname = \"x\\\\y\"\n":                                                              "must not contain",
		"[[step]]\nname = \"a..b\"\n":                                                                "must not contain",
		"[[step]]\nname = \"a\"\ncommand = \"y\"\n":                                                  "p.toml:1: step 1: step 'a' has no image",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"   \"\n":                                 "p.toml:4: step 1: step 'a' has no command",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"y\"\noutput = \"/\"\n":                   "p.toml:5: step 1: output \"/\"",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"y\"\ninput = \"/a:b\"\n":                 "p.toml:5: step 1: input",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"y\"\ntimeout = \"soon\"\n":               "p.toml:5: step 1: timeout",
		"[[step]]\nname = \"a\"\nimage = \"x\"\ncommand = \"y\"\ninput = \"/d\"\noutput = \"/d/\"\n": "input and output are the same",
	} {
		_, err := ParsePipeline("p.toml", []byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

// fake is a Runner that prints and exits with code after d, or ends
// with ctx.
func fake(out string, code int, d time.Duration, running *atomic.Int32, peak *atomic.Int32) Runner {
	return func(ctx context.Context, stdout, stderr io.Writer) (int, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		io.WriteString(stdout, out)
		select {
		case <-time.After(d):
			return code, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func TestParallel(t *testing.T) {
	var running, peak atomic.Int32
	jobs := []Job{
		{"a", fake("one\ntwo", 0, 50*time.Millisecond, &running, &peak)},
		{"b", fake("", 3, 10*time.Millisecond, &running, &peak)},
		{"c", fake("x\n", 0, 30*time.Millisecond, &running, &peak)},
	}
	var out, status bytes.Buffer
	res, _ := Parallel(context.Background(), jobs, ParallelOptions{Limit: 2, Stdout: &out, Status: &status})
	if peak.Load() != 2 {
		t.Errorf("peak concurrency %d, want 2", peak.Load())
	}
	if !res[0].OK() || res[1].OK() || res[1].ExitCode != 3 || !res[2].OK() {
		t.Errorf("results: %+v", res)
	}
	if !strings.Contains(out.String(), "[a] one\n[a] two\n") || !strings.Contains(out.String(), "[c] x\n") {
		t.Errorf("output: %q", out.String())
	}
	s := status.String()
	if !strings.HasPrefix(s, "Running 3 jobs in parallel...\n") || !strings.Contains(s, "  b FAILED (") || !strings.Contains(s, "exit status 3") || !strings.Contains(s, "  a done (") || strings.Contains(s, "\x1b[") {
		t.Errorf("status: %q", s)
	}

	// Live: escape sequences, every job's last state drawn.
	status.Reset()
	peak.Store(0)
	Parallel(context.Background(), jobs, ParallelOptions{Stdout: io.Discard, Status: &status, Live: true})
	if s := status.String(); !strings.Contains(s, "\x1b[2K") || !strings.Contains(s, "\x1b[3A") || peak.Load() != 3 {
		t.Errorf("live status: %q (peak %d)", s, peak.Load())
	}

	// Cancelled: running jobs end, waiting ones never start.
	ctx, cancel := context.WithCancel(context.Background())
	long := []Job{{"l1", fake("", 0, time.Minute, &running, &peak)}, {"l2", fake("", 0, time.Minute, &running, &peak)}}
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	res, _ = Parallel(ctx, long, ParallelOptions{Limit: 1, Stdout: io.Discard, Status: io.Discard})
	if time.Since(start) > 10*time.Second || res[0].OK() || res[1].Started || running.Load() != 0 {
		t.Errorf("cancel: %+v after %v", res, time.Since(start))
	}
}

func TestCappedOutput(t *testing.T) {
	c := &capped{max: 4}
	c.Write([]byte("abcdefg"))
	var b bytes.Buffer
	c.writeBlock(&b, "j")
	if b.String() != "[j] abcd\n[j] [3 more bytes of output dropped]\n" {
		t.Errorf("%q", b.String())
	}
}

// TestRunPipeline: files handed on (regular ones only, links not
// followed), the failing step named, every directory removed.
func TestRunPipeline(t *testing.T) {
	tmp := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	var seen []string
	steps := []PipelineStep{
		{Step: Step{Name: "gen", Output: "/out"}, Run: func(ctx context.Context, in, out string, so, se io.Writer) (int, error) {
			os.WriteFile(filepath.Join(out, "f"), []byte("data"), 0o644)
			os.Symlink(secret, filepath.Join(out, "link"))
			os.Mkdir(filepath.Join(out, "dir"), 0o755)
			syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644)
			return 0, nil
		}},
		{Step: Step{Name: "use", Input: "/in"}, Run: func(ctx context.Context, in, out string, so, se io.Writer) (int, error) {
			ents, _ := os.ReadDir(in)
			for _, e := range ents {
				b, _ := os.ReadFile(filepath.Join(in, e.Name()))
				seen = append(seen, fmt.Sprintf("%s=%s", e.Name(), b))
			}
			return 0, nil
		}},
	}
	var status bytes.Buffer
	if err := RunPipeline(context.Background(), steps, PipelineOptions{Stdout: io.Discard, Stderr: io.Discard, Status: &status, TempDir: tmp}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(seen, ",") != "f=data" {
		t.Errorf("handed on: %v", seen)
	}
	if !strings.Contains(status.String(), "  [1/2] gen                  done (") || !strings.Contains(status.String(), "  Done (") {
		t.Errorf("status: %q", status.String())
	}
	steps[1].Run = func(ctx context.Context, in, out string, so, se io.Writer) (int, error) { return 2, nil }
	steps = append(steps, PipelineStep{Step: Step{Name: "never"}, Run: func(context.Context, string, string, io.Writer, io.Writer) (int, error) {
		t.Error("ran after a failure")
		return 0, nil
	}})
	err := RunPipeline(context.Background(), steps, PipelineOptions{Stdout: io.Discard, Stderr: io.Discard, Status: io.Discard, TempDir: tmp})
	var se *StepError
	if !errors.As(err, &se) || !errors.Is(err, ErrStepFailed) || se.Name != "use" || se.Index != 2 || se.Total != 3 || !strings.HasPrefix(err.Error(), "Pipeline failed at step 'use' (2/3)") {
		t.Errorf("failure: %v", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}
