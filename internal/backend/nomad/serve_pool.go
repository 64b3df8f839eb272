package nomad

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Warm pools of `serve` (sandbox.Preparer): the API's pools ([daemon]
// min_warm and max_warm, `daemon prewarm -B nomad`) hold Prepared
// sandboxes that are pool jobs of this process, one pool per spec (its
// name the spec's digest), started and answering ahead of their command.
// A run takes one: it claims the job (the Nomad Variable, check-and-set,
// as any taker does), runs its command through the exec API and purges
// it. A persistent sandbox booted by its supervisor takes any waiting
// job of its spec's digest (CreateMatching) before it makes a job of its
// own. A Prepared whose job was taken meanwhile runs its command in a
// fresh job, as Run does.
//
// The process holds a lease (KeepLease, leaseTTL) while it lives; the
// first preparation reaps the leftovers of processes whose lease lapsed
// (ReapPools), and `-B nomad sandbox reap` does too.

var _ sandbox.Preparer = (*Sandboxes)(nil)

// leaseTTL is how long a serving process's pool jobs outlive it.
const leaseTTL = 2 * time.Minute

// poolState is the serving process's pools: its owner id and lease.
type poolState struct {
	once  sync.Once
	owner string
	err   error
}

// startPools takes the lease and reaps leftovers, once.
func (s *Sandboxes) startPools(b *Backend) error {
	s.pools.once.Do(func() {
		var id [6]byte
		if _, err := rand.Read(id[:]); err != nil {
			s.pools.err = err
			return
		}
		s.pools.owner = "serve-" + hex.EncodeToString(id[:])
		// The lease lives as long as this process.
		if err := b.KeepLease(context.Background(), s.pools.owner, leaseTTL); err != nil {
			s.pools.err = fmt.Errorf("backend nomad: warm pools need Nomad Variables (a token whose policy allows variables read, write and list under agentkernel/): %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = b.ReapPools(ctx)
	})
	return s.pools.err
}

// Prepare starts a pool job for spec and returns once its sandbox
// answers (sandbox.Preparer).
func (s *Sandboxes) Prepare(ctx context.Context, spec *sandbox.Spec) (sandbox.Prepared, error) {
	c := *spec
	c.Args = []string{"true"}
	if err := s.Check(&c); err != nil {
		return nil, err
	}
	c.Args = nil
	b, _ := s.backend()
	if err := s.startPools(b); err != nil {
		return nil, err
	}
	r := s.request(&c, "pool")
	p := &Pool{Name: "d-" + b.specDigest(r), Request: *r, Owner: s.pools.owner}
	job, err := b.registerPoolJob(ctx, p)
	if err != nil {
		return nil, err
	}
	id, node := *job.ID, job.Meta[NodeNameMeta]
	if _, err := b.readyJob(ctx, id, node, s.startTimeout); err != nil {
		_ = b.takeAndPurge(context.WithoutCancel(ctx), id)
		return nil, err
	}
	return &prepared{s: s, b: b, spec: &c, job: id, node: node}, nil
}

// readyJob waits until job id's task runs and a command runs in its
// sandbox (named node on the node), at most timeout.
func (b *Backend) readyJob(ctx context.Context, id, node string, timeout time.Duration) (*api.Allocation, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		a, err := b.runningAllocOf(ctx, id)
		if err == nil && a != nil {
			var code int
			code, err = b.execIn(ctx, a, node, b.execCommand(node, []string{"true"}), false, nil, nil, nil)
			if err == nil && code == 0 {
				return a, nil
			}
			if err == nil {
				err = fmt.Errorf("exit %d", code)
			}
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pool job %s does not answer (%v): look at `nomad alloc logs` of it: %w", id, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// prepared is a pool job of this process waiting for its one command.
type prepared struct {
	s         *Sandboxes
	b         *Backend
	spec      *sandbox.Spec
	job, node string
	once      sync.Once
}

func (p *prepared) Warnings() []string { return nil }

// Close purges the job, unless a sandbox took it.
func (p *prepared) Close() {
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.b.takeAndPurge(ctx, p.job)
	})
}

// Run claims the job, runs args in its sandbox through the exec API and
// purges it; signals end the command (the exec API forwards none). When
// a sandbox took the job meanwhile, args run in a fresh job (Run).
func (p *prepared) Run(ctx context.Context, args []string, stdio sandbox.Stdio, sigs <-chan os.Signal) (sandbox.Result, error) {
	used := false
	p.once.Do(func() { used = true })
	if !used {
		return sandbox.Result{}, errors.New("backend nomad: a prepared sandbox runs one command")
	}
	spec := *p.spec
	spec.Args = args
	_, err := p.b.claimItems(ctx, p.job, api.VariableItems{"run": p.s.pools.owner})
	if errors.Is(err, errClaimed) {
		return p.s.Run(ctx, &spec, stdio)
	}
	if err != nil {
		return sandbox.Result{}, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.b.purgePoolJob(ctx, p.job)
	}()
	a, err := p.b.runningAllocOf(ctx, p.job)
	if err != nil {
		return sandbox.Result{}, err
	}
	if a == nil {
		// Its task ended while it waited: a fresh job.
		return p.s.Run(ctx, &spec, stdio)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if spec.Resources.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(runCtx, spec.Resources.Timeout)
		defer cancel()
	}
	if sigs != nil {
		go func() {
			select {
			case <-sigs:
				cancel()
			case <-runCtx.Done():
			}
		}()
	}
	x, err := execWithEnv(p.node, args, spec.Env, spec.Workdir, spec.User, false)
	if err != nil {
		return sandbox.Result{}, err
	}
	code, err := p.b.runNode(runCtx, a, p.node, x, nil, stdio.Stdout, stdio.Stderr)
	if err != nil {
		if ctx.Err() == nil && runCtx.Err() != nil {
			if spec.Resources.Timeout > 0 && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
				return sandbox.Result{ExitCode: 124, TimedOut: true}, nil
			}
			return sandbox.Result{ExitCode: 128 + 15, Signal: 15}, nil
		}
		return sandbox.Result{}, err
	}
	return resultOf(code), nil
}
