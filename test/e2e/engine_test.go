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
			for _, args := range [][]string{
				{"--network", "full"},
				{"-k"},
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
