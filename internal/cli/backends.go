package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/internal/backend/engine"
	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/backend/nomad"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// moreBackends are the backends besides native that agentkernel-full's
// runs and persistent sandboxes may name with -B. Each is registered
// here, one line apiece; one that is also a sandbox.Booter hosts
// persistent sandboxes (sandbox create -B, run --name -B), booted by
// their supervisor through persistentBooter.
func (a *App) moreBackends() []sandbox.Backend {
	return []sandbox.Backend{
		gvisor.New(gvisor.Options{DataDir: a.DataDir, Warn: func(s string) { a.Warnf("%s", s) }}),
		engine.Docker(a.engineOptions()),
		engine.Podman(a.engineOptions()),
		nomadSandboxes(a.ConfigPath),
	}
}

// nomadSandboxes is the nomad backend over [orchestrator] of the trusted
// configuration (the user's file, and the --config file configPath over
// it), read when a sandbox first needs it: runs and persistent sandboxes
// as Nomad jobs, for `serve` (and [sandbox] backend = "nomad"); the -B
// nomad command lines are package nomadcli's.
func nomadSandboxes(configPath string) sandbox.Backend {
	if configPath != "" {
		if abs, err := filepath.Abs(configPath); err == nil {
			configPath = abs
		}
	}
	return nomad.NewSandboxes(func() (nomad.ServeOptions, error) {
		o, err := nomad.LoadOptions(configPath)
		return nomad.ServeOptions{Options: o}, err
	})
}

// sandboxAudits are what a persistent sandbox's supervisor writes to the
// audit log as its sandbox reports it: its network policy's refusals,
// and the secrets its network helper added to requests.
type sandboxAudits struct {
	onDeny   func(spec *sandbox.Spec, d sandbox.NetworkDenial)
	onInject func(spec *sandbox.Spec, is []sandbox.SecretInjection)
}

// moreBackendsFor are moreBackends as a sandbox's supervisor makes them:
// its data directory, logger, warnings, [security] allow_degraded, the
// --config file its starter read and its audit log's hooks.
func moreBackendsFor(dataDir string, logger *slog.Logger, warn func(string), allowDegraded []string, configPath string, audits sandboxAudits) []sandbox.Backend {
	a := &App{App: &runcli.App{DataDir: dataDir, Logger: logger, Stderr: io.Discard, Quiet: true}}
	o := a.engineOptions()
	o.Warn = warn
	o.AllowDegraded = func() []string { return allowDegraded }
	return []sandbox.Backend{
		gvisor.New(gvisor.Options{DataDir: dataDir, Warn: warn, OnNetworkDeny: audits.onDeny, OnSecretInjections: audits.onInject}),
		engine.Docker(o),
		engine.Podman(o),
		nomadSandboxes(configPath),
	}
}

// freezers are the sandbox.Freezers of moreBackends by name: what holds
// their running persistent sandboxes still while a snapshot copies
// their files (native's is the supervisor's Reclaimer).
func (a *App) freezers() map[string]sandbox.Freezer {
	out := map[string]sandbox.Freezer{}
	for _, b := range a.moreBackends() {
		if fz, ok := b.(sandbox.Freezer); ok {
			out[b.Name()] = fz
		}
	}
	return out
}

// cgroupRemovers are the cgroup removers of the backends other than
// native's, by name.
func (a *App) cgroupRemovers() map[string]sandbox.CgroupRemover {
	out := map[string]sandbox.CgroupRemover{}
	for _, b := range a.moreBackends() {
		if r, ok := b.(sandbox.CgroupRemover); ok {
			out[strings.ToLower(b.Name())] = r
		}
	}
	return out
}

// persistentBooter is the Booter of the backend a persistent sandbox was
// created on (Spec.Backend): native's for "" or "native", else the one
// of more of that name, which must be a sandbox.Booter.
func persistentBooter(name string, native sandbox.Booter, more []sandbox.Backend) (sandbox.Booter, error) {
	if name == "" || strings.EqualFold(name, "native") {
		return native, nil
	}
	for _, b := range more {
		if !strings.EqualFold(b.Name(), name) {
			continue
		}
		if bt, ok := b.(sandbox.Booter); ok {
			return bt, nil
		}
		return nil, fmt.Errorf("backend %s cannot host persistent sandboxes: %w", name, sandbox.ErrUnsupported)
	}
	return nil, fmt.Errorf("the sandbox's backend %q is not in this build: %w", name, sandbox.ErrUnsupported)
}

// engineOptions wire the docker and podman backends to the image store
// (their images come from it, as `docker save` archives) and the run's
// warnings.
func (a *App) engineOptions() engine.Options {
	return engine.Options{
		Archive: func(ctx context.Context, r image.Rootfs, ref string, w io.Writer) error {
			s, err := a.openImageStore()
			if err != nil {
				return err
			}
			return s.WriteArchive(ctx, image.ExportSource{Layers: r.Layers, IDMap: r.IDMap, BaseDigest: r.Digest, Config: r.Config, CreatedBy: "agentkernel"}, ref, w)
		},
		Warn:          func(s string) { a.Warnf("%s", s) },
		AllowDegraded: a.AllowDegradedNow,
		DataDir:       a.DataDir,
	}
}
