package cli

import (
	"context"
	"io"

	"github.com/agentkernel/agentkernel/internal/backend/engine"
	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// moreBackends are the backends besides native that agentkernel-full's
// runs may name with -B. Each is registered here, one line apiece.
func (a *App) moreBackends() []sandbox.Backend {
	return []sandbox.Backend{
		gvisor.New(gvisor.Options{DataDir: a.DataDir, Warn: func(s string) { a.Warnf("%s", s) }}),
		engine.Docker(a.engineOptions()),
		engine.Podman(a.engineOptions()),
	}
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
	}
}
