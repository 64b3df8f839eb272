//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/bench/harness"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestRunEngineBackends runs the built binary with -B docker and -B
// podman against a private dockerd and podman service: the command's
// output and exit status, the egress and Landlock rules, what these
// backends refuse, and an engine that does not answer.
func TestRunEngineBackends(t *testing.T) {
	work, err := os.MkdirTemp("", "ake2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(work) })
	for _, c := range []struct {
		name, env string
		start     func(string) (string, func(), error)
	}{
		{"docker", "DOCKER_HOST", harness.StartPrivateDocker},
		{"podman", "CONTAINER_HOST", harness.StartPodmanService},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, stop, err := c.start(filepath.Join(work, c.name))
			if err != nil {
				testenv.Missing(t, "%s: %v", c.name, err)
			}
			t.Cleanup(stop)
			a, ref := withRegistry(t)
			a.env = append(a.env, c.env+"="+host)
			r := a.run("run", "-B", c.name, "-p", "permissive", "--image", ref, "--", "sh", "-c", "echo hi; exit 3")
			if r.code != 125 || !strings.Contains(r.stderr, "allow_degraded") || !strings.Contains(r.stderr, "Landlock") {
				t.Fatalf("without allow_degraded the run must be refused: %v", r)
			}
			cfg := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
			if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfg, []byte("[security]\nallow_degraded = [\"landlock\"]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			r = a.run("run", "-B", c.name, "-p", "permissive", "--image", ref, "--", "sh", "-c", "echo hi; cat /proc/net/dev | grep -c :; exit 3")
			if r.code != 3 || r.stdout != "hi\n1\n" || strings.Count(r.stderr, "loopback only") != 1 {
				t.Fatalf("run: %v", r)
			}
			r = a.run("run", "-B", c.name, "-p", "permissive", "--image", ref, "--", "/no/such")
			if r.code != 127 {
				t.Errorf("missing command: %v", r)
			}
			// The default profile, moderate: the project at /workspace,
			// copy-on-write.
			if err := os.WriteFile(filepath.Join(a.dir, "src"), []byte("host\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			r = a.run("run", "-B", c.name, "--image", ref, "--", "sh", "-c", "cat /workspace/src; echo sandbox > /workspace/src; cat /workspace/src")
			if b, _ := os.ReadFile(filepath.Join(a.dir, "src")); r.code != 0 || r.stdout != "host\nsandbox\n" || string(b) != "host\n" {
				t.Fatalf("default profile: %v (host file %q)", r, b)
			}
			// A persistent sandbox: create, exec, cp, stats, stop, remove.
			r = a.run("run", "-B", c.name, "--image", ref, "--name", "box", "-d")
			if r.code != 0 || r.stdout != "box\n" {
				t.Fatalf("run -d: %v", r)
			}
			r = a.run("exec", "box", "--", "sh", "-c", "echo changed > /workspace/src; cat /proc/1/cmdline; exit 4")
			if r.code != 4 || !strings.HasPrefix(r.stdout, "/.agentkernel-idle") {
				t.Errorf("exec: %v", r)
			}
			r = a.run("cp", "box:/workspace/src", filepath.Join(a.home, "out"))
			if b, _ := os.ReadFile(filepath.Join(a.home, "out")); r.code != 0 || string(b) != "changed\n" {
				t.Errorf("cp out: %v %q", r, b)
			}
			r = a.run("stats", "box", "--json")
			if r.code != 0 || !strings.Contains(r.stdout, "box") {
				t.Errorf("stats: %v", r)
			}
			r = a.run("sandbox", "list", "--json")
			if r.code != 0 || !strings.Contains(r.stdout, `"backend":"`+c.name+`"`) && !strings.Contains(r.stdout, `"backend": "`+c.name+`"`) {
				t.Errorf("list: %v", r)
			}
			r = a.run("sandbox", "stop", "box")
			if r.code != 0 {
				t.Errorf("stop: %v", r)
			}
			r = a.run("sandbox", "start", "box")
			if r.code != 0 {
				t.Errorf("start: %v", r)
			}
			r = a.run("exec", "box", "--", "cat", "/workspace/src")
			if r.code != 0 || r.stdout != "changed\n" {
				t.Errorf("after a restart: %v", r)
			}
			r = a.run("snapshot", "take", "box")
			if r.code == 0 || !strings.Contains(r.stderr, "no snapshots yet") {
				t.Errorf("snapshot of an engine's sandbox: %v", r)
			}
			r = a.run("sandbox", "rm", "-f", "box")
			if b, _ := os.ReadFile(filepath.Join(a.dir, "src")); r.code != 0 || string(b) != "host\n" {
				t.Errorf("rm: %v (host file %q)", r, b)
			}
			r = a.run("gc")
			if r.code != 0 || strings.Contains(r.stdout, "container") {
				t.Errorf("gc after a clean remove: %v", r)
			}
			r = a.run("benchmark", "--backends", c.name, "--iterations", "2", "--warmup", "0", "--image", ref, "--json")
			if r.code != 0 || !strings.Contains(r.stdout, `"backend": "`+c.name+`"`) || !strings.Contains(r.stdout, `"iterations": 2`) {
				t.Errorf("benchmark: %v", r)
			}
			for _, args := range [][]string{
				{"--network", "full"},
			} {
				full := append(append([]string{"run", "-B", c.name, "--image", ref}, args...), "--", "true")
				r = a.run(full...)
				if r.code != 125 || !strings.Contains(r.stderr, "-B native") {
					t.Errorf("%v: want exit 125 pointing at -B native: %v", args, r)
				}
			}
			a.env = append(a.env, c.env+"=unix:///nonexistent/engine.sock")
			r = a.run("run", "-B", c.name, "-p", "permissive", "--image", ref, "--", "true")
			if r.code != 125 || !strings.Contains(r.stderr, "/nonexistent/engine.sock") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 2 {
				t.Errorf("no engine: %v", r)
			}
		})
	}
}
