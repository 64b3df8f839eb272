package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/agentkernel/agentkernel/internal/backend/bootprep"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

var _ sandbox.Preparer = (*Backend)(nil)

// Prepare starts a container for spec ahead of its command (the warm
// pools, sandbox.Preparer): a persistent sandbox's container (its PID 1
// the idle program, every part of the spec but the command) of its own
// id, its directory under DataDir/engine (the idle program, the
// copy-on-write layers). Its one command runs through the engine's exec
// as the container's user, in its working directory and environment;
// the container and the directory are removed once it has ended.
func (b *Backend) Prepare(ctx context.Context, spec *sandbox.Spec) (sandbox.Prepared, error) {
	c := *spec
	c.Args, c.TTY, c.Interactive = nil, false, false
	var id [8]byte
	_, _ = rand.Read(id[:])
	c.ID = "pool-" + hex.EncodeToString(id[:])
	if err := b.check(&c, false); err != nil {
		return nil, err
	}
	dir, err := b.runDir(&c)
	if err != nil {
		return nil, err
	}
	remove := func() {
		if err := os.RemoveAll(dir); err != nil {
			b.opts.Warn(fmt.Sprintf("backend %s: removing %s: %v", b.name, dir, err))
		}
	}
	in, err := b.boot(ctx, &c, dir, nil, true)
	if err != nil {
		remove()
		return nil, err
	}
	// What a cold run would warn about, said to the run that takes
	// the container rather than at each preparation.
	var warnings []string
	if c.Security.Landlock {
		warnings = append(warnings, b.landlockWarning())
	}
	return bootprep.New(in.(*instance), &c, remove, b.bg, warnings), nil
}

// Drain waits until the containers of finished pooled runs are removed.
func (b *Backend) Drain() { b.bg.Wait() }
