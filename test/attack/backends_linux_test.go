//go:build linux

package attack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/bench/harness"
	"github.com/agentkernel/agentkernel/internal/backend/engine"
	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/contract"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// backendUnderTest is a backend other than native that a battery runs
// through: the same probes, fixtures, positive controls and host checks,
// judged by the same table, with the differences of that backend from
// internal/contract.
type backendUnderTest struct {
	name string
	// new makes the backend for a battery's runner.
	new func(r *runner) sandbox.Backend
	// adjust fits a spec the runner resolved to this backend (the engine
	// loads the image by its digest).
	adjust func(r *runner, spec *sandbox.Spec)
}

// envBackends limits TestAttackBackends to some backends
// (ATTACK_BACKENDS=gvisor,docker), for investigating.
const envBackends = "ATTACK_BACKENDS"

// TestAttackBackends runs the root battery through every backend but
// native (TestAttack runs native's, as root, root-pool and rootless):
// gvisor, docker and podman. Each backend's expectations are native's
// table with that backend's differences from internal/contract, each
// with its reason; a backend the machine lacks fails under the suite
// (testenv.Missing) and is skipped elsewhere.
func TestAttackBackends(t *testing.T) {
	if os.Getenv(envInner) != "" {
		t.Skip("inner process of another variant")
	}
	testenv.RequireRoot(t)
	probes := buildProbes(t)
	names := contract.Backends()[1:]
	if v := os.Getenv(envBackends); v != "" {
		names = strings.Split(v, ",")
	}
	// Each battery runs the positive controls again (a second or so):
	// some aim at its own fixtures (read_other_upper's other sandbox).
	start := time.Now()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			bk := backendFor(t, name)
			res := batteryOn(t, name, probes, nil, bk)
			t.Logf("%s battery: %v", name, res.Took.Round(time.Millisecond))
			assertResults(t, res)
		})
	}
	t.Logf("batteries took %v", time.Since(start).Round(time.Millisecond))
}

// backendFor sets up backend name for the batteries: runsc for gvisor,
// a private dockerd or podman service for the engines.
func backendFor(t *testing.T, name string) *backendUnderTest {
	t.Helper()
	switch name {
	case contract.GVisor:
		if d := gvisor.Diagnose(context.Background()); d.Problem != "" {
			testenv.Missing(t, "gvisor: %s", d.Problem)
		}
		return &backendUnderTest{
			name: name,
			new: func(r *runner) sandbox.Backend {
				return gvisor.New(gvisor.Options{DataDir: r.f.dataDir, Warn: r.warn})
			},
			adjust: func(*runner, *sandbox.Spec) {},
		}
	case contract.Docker, contract.Podman:
		work, err := os.MkdirTemp("", "attack-"+name+"-")
		must(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(work) })
		startEngine := harness.StartPrivateDocker
		if name == contract.Podman {
			startEngine = harness.StartPodmanService
		}
		host, stop, err := startEngine(work)
		if err != nil {
			testenv.Missing(t, "%s: %v", name, err)
		}
		t.Cleanup(stop)
		store, err := image.Open(filepath.Join(work, "store"), image.Options{IDMap: image.DefaultIDMap()})
		must(t, err)
		return &backendUnderTest{
			name: name,
			new: func(r *runner) sandbox.Backend {
				opts := engine.Options{
					Host: host,
					Archive: func(ctx context.Context, rootfs image.Rootfs, ref string, w io.Writer) error {
						return store.WriteArchive(ctx, image.ExportSource{Layers: rootfs.Layers, IDMap: rootfs.IDMap}, ref, w)
					},
					Warn: r.warn,
					// The engines give no Landlock fence: the battery
					// runs without it, as allow_degraded lets users.
					AllowDegraded: func() []string { return []string{config.DegradeLandlock} },
					DataDir:       r.f.dataDir,
				}
				if name == contract.Docker {
					return engine.Docker(opts)
				}
				return engine.Podman(opts)
			},
			adjust: func(r *runner, spec *sandbox.Spec) {
				// The engine knows an image by its digest: one per
				// stack of layers.
				sum := sha256.Sum256([]byte(r.f.token + "\x00" + strings.Join(spec.Rootfs.Layers, "\x00")))
				spec.Rootfs.Digest = "sha256:" + hex.EncodeToString(sum[:])
				spec.Rootfs.IDMap = image.DefaultIDMap()
			},
		}
	}
	t.Fatalf("no backend %q (want one of %v)", name, contract.Backends()[1:])
	return nil
}

// otherSandboxBackend runs the battery's other sandbox, whose secret
// read_other_upper hunts: the battery's backend, but native for gvisor,
// whose sandboxes' files the host cannot reach (they are in gVisor's own
// overlay), so that the probe has a secret on the host to aim at.
func (r *runner) otherSandboxBackend() sandbox.Backend {
	if r.other == nil || r.other.name != contract.GVisor {
		return r.backend
	}
	return native.New(native.Options{DataDir: r.f.dataDir, NetHelper: netHelper, Warn: r.warn})
}

// warn collects a backend's warnings (one each).
func (r *runner) warn(s string) {
	r.mu.Lock()
	r.warnings[s] = true
	r.mu.Unlock()
}
