package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// cachedRunsc is the runsc that scripts/runsc.sh cached on this host.
func cachedRunsc(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(gvisor.RunscEnv); p != "" {
		return p
	}
	m, _ := filepath.Glob("/var/cache/agentkernel/runsc-*/runsc")
	if len(m) == 0 {
		testenv.Missing(t, "no runsc: set %s or run scripts/runsc.sh", gvisor.RunscEnv)
	}
	return m[len(m)-1]
}

// TestPickAuto: -B auto's ladder with the real runsc and the real
// gvisor backend's Check: gvisor for an image run as root, bound secrets
// and secret files included; native for a run gvisor refuses (the host
// image); native without runsc.
func TestPickAuto(t *testing.T) {
	testenv.RequireRoot(t)
	runsc := cachedRunsc(t)
	a := NewApp(runcli.App{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, DataDir: t.TempDir()})
	ctx := context.Background()

	t.Setenv(gvisor.RunscEnv, runsc)
	img := &sandbox.Spec{Image: "alpine:3.20", Args: []string{"true"}}
	if b, why := a.pickAuto(ctx, img); b != "gvisor" || !strings.Contains(why, runsc) {
		t.Errorf("image run with runsc: %s (%s), want gvisor", b, why)
	}
	host := &sandbox.Spec{Image: "host", Rootfs: image.Rootfs{Host: true}, Args: []string{"true"}}
	if b, why := a.pickAuto(ctx, host); b != "native" || !strings.Contains(why, "host image") {
		t.Errorf("host image: %s (%s), want native because of the host image", b, why)
	}
	// Secrets bound to hosts go through gvisor's network helper as
	// through native's, and secret files on a tmpfs of the run's own.
	sec := &sandbox.Spec{Image: "alpine:3.20", Args: []string{"true"}, Secrets: &sandbox.Secrets{Bindings: []sandbox.SecretBinding{{}}}}
	if b, why := a.pickAuto(ctx, sec); b != "gvisor" {
		t.Errorf("bound secrets: %s (%s), want gvisor", b, why)
	}
	files := &sandbox.Spec{Image: "alpine:3.20", Args: []string{"true"}, Secrets: &sandbox.Secrets{Files: []sandbox.SecretFile{{Key: "K", Value: []byte("v")}}}}
	if b, why := a.pickAuto(ctx, files); b != "gvisor" {
		t.Errorf("secret files: %s (%s), want gvisor", b, why)
	}

	t.Setenv(gvisor.RunscEnv, filepath.Join(t.TempDir(), "runsc"))
	if b, why := a.pickAuto(ctx, img); b != "native" || !strings.Contains(why, "not usable") {
		t.Errorf("without runsc: %s (%s), want native", b, why)
	}
}
