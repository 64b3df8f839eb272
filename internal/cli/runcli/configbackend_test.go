package runcli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigBackend: [sandbox] backend is the run's backend when -B names
// none: in the agentkernel binary (no other backends) a run whose
// configuration names another backend hands off to agentkernel-full, as
// -B does; -B native wins over the file; an unknown name is refused at
// load with the file and line, exit status 125.
func TestConfigBackend(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir+"/config")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "agentkernel.toml"), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	write("[sandbox]\nbackend = \"docker\"\n")
	if _, _, _, err := runLine(t, false, "run", "--dry-run", "-i", "alpine:3.20", "true"); !errors.Is(err, ErrNeedsFull) {
		t.Errorf("backend = docker in the project file: %v, want ErrNeedsFull", err)
	}
	if _, _, _, err := runLine(t, true, "run", "--name", "box", "-i", "alpine:3.20", "true"); err != nil {
		t.Errorf("persistent run with backend = docker: %v", err)
	}
	o, got, _, err := runLine(t, true, "run", "--name", "box", "-i", "alpine:3.20", "true")
	if err != nil || got == nil || got.Backend != "docker" || o.backend != "docker" {
		t.Errorf("persistent run: backend %v (err %v), want docker from the file", got, err)
	}
	_, _, out, err := runLine(t, false, "run", "--dry-run", "-B", "native", "-i", "alpine:3.20", "true")
	if err != nil || !strings.Contains(out, `"alpine:3.20"`) {
		t.Errorf("-B native over backend = docker: %v\n%s", err, out)
	}

	write("[sandbox]\nname = \"x\"\nbackend = \"GVISOR\"\n")
	if _, _, _, err := runLine(t, false, "run", "--dry-run", "-i", "alpine:3.20", "true"); !errors.Is(err, ErrNeedsFull) {
		t.Errorf("backend = GVISOR: %v, want ErrNeedsFull", err)
	}

	write("[sandbox]\nbackend = \"auto\"\n")
	if _, _, _, err := runLine(t, false, "run", "--dry-run", "-i", "alpine:3.20", "true"); !errors.Is(err, ErrNeedsFull) {
		t.Errorf("backend = auto without PickAuto: %v, want ErrNeedsFull", err)
	}
	// The Manager picks for the sandbox's spec when it creates it.
	if _, got, _, err := runLine(t, true, "run", "--name", "box", "-i", "alpine:3.20", "true"); err != nil || got == nil || got.Backend != "auto" {
		t.Errorf("persistent run with backend = auto: %+v (err %v), want auto handed on", got, err)
	}

	write("[sandbox]\nname = \"x\"\nbackend = \"chroot\"\n")
	_, _, _, err = runLine(t, false, "run", "--dry-run", "-i", "alpine:3.20", "true")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(err.Error(), "agentkernel.toml:3") || !strings.Contains(err.Error(), `unknown backend "chroot"`) {
		t.Errorf("backend = chroot: %v, want exit 125 naming agentkernel.toml:3", err)
	}
}
