package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentkernel/agentkernel/internal/backend/bootprep"
	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

var _ sandbox.Preparer = (*Backend)(nil)

// Prepare starts a gVisor sandbox for spec ahead of its command (the warm
// pools, sandbox.Preparer): a persistent sandbox's boot (its first
// process the idle init, every part of the spec but the command) in a
// directory of its own under <data-dir>/gvisor, named as a run's and
// locked as a run's, so that gc removes it only once its process died.
// Its one command runs through `runsc exec` as the spec's user, in its
// working directory and environment; the sandbox and the directory are
// removed once it has ended.
func (b *Backend) Prepare(ctx context.Context, spec *sandbox.Spec) (sandbox.Prepared, error) {
	prestart.Discard()
	if hasSecrets(spec) || spec.SecretBindings != nil {
		// A warm sandbox serves requests of any caller: a CA,
		// placeholders and secret files are a request's own.
		return nil, fmt.Errorf("secret injection (-S/--secret, --secret-file) is not supported for pooled sandboxes: %w", sandbox.ErrUnsupported)
	}
	if b.opts.DataDir == "" {
		return nil, errors.New("the gvisor backend needs a data directory")
	}
	c := *spec
	c.Args, c.TTY, c.Interactive = nil, false, false
	c.ID = "pool-" + randomHex()
	base := filepath.Join(b.opts.DataDir, "gvisor")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, err
	}
	dir := filepath.Join(base, "agentkernel-"+c.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := lockRun(dir)
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	remove := func() {
		// The sandbox's last processes leave its cgroups a moment
		// after runsc has ended.
		for n := 0; n < 100 && removeCgroupsLeft(cgroupName("agentkernel-"+c.ID)); n++ {
			time.Sleep(50 * time.Millisecond)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.opts.Warn(fmt.Sprintf("removing the gvisor sandbox's directory: %v", err))
		}
		lock.Close()
	}
	in, err := b.boot(ctx, &c, dir, nil, true)
	if err != nil {
		remove()
		return nil, err
	}
	return bootprep.New(in.(*Instance), &c, remove, &b.bg, nil), nil
}

// Drain waits until the sandboxes of finished pooled runs are removed.
func (b *Backend) Drain() { b.bg.Wait() }
