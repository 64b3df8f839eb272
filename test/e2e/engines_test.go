//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentkernel/agentkernel/bench/harness"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// engine is a container engine a test runs privately: its backend's
// name, the variable that gives agentkernel its address, and how the
// harness starts it.
type engine struct {
	name, env string
	start     func(dir string) (host string, stop func(), err error)
}

// engines are docker (a private dockerd) and podman (podman system
// service).
func engines() []engine {
	return []engine{
		{"docker", "DOCKER_HOST", harness.StartPrivateDocker},
		{"podman", "CONTAINER_HOST", harness.StartPodmanService},
	}
}

// startEngine starts e in a directory of its own, stopped and removed
// when t ends, and returns its address; an engine that cannot start is
// missing (testenv.Missing: a failure in strict mode).
func startEngine(t *testing.T, e engine) string {
	t.Helper()
	work, err := os.MkdirTemp("", "ake2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(work) })
	host, stop, err := e.start(filepath.Join(work, e.name))
	if err != nil {
		testenv.Missing(t, "%s: %v", e.name, err)
	}
	t.Cleanup(stop)
	return host
}

// withEngine is withRegistry for runs on e at host: the engine's address
// in the environment, and Landlock allowed to be missing (a container
// of these engines loads no Landlock rules: `[security] allow_degraded`).
func withEngine(t *testing.T, e engine, host string) (*ak, string) {
	t.Helper()
	a, ref := withRegistry(t)
	a.env = append(a.env, e.env+"="+host)
	cfg := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("[security]\nallow_degraded = [\"landlock\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return a, ref
}
