package nomad

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Warm pools.
//
// A pool job is a sandbox's job started ahead of the sandbox that will
// take it: its ID is agentkernel.pool-HEX (never agentkernel-NAME, so
// that no sandbox name collides with it and List does not show it), its
// task the node's agentkernel running a native sandbox named pool-HEX
// on the node, made from the pool's request (image, profile, network,
// allowed domains, memory and CPU). Its meta says which pool it is of
// (PoolMeta), a digest of that request and of the backend's settings
// (PoolSpecMeta: only a request of the same digest takes it) and, for a
// pool a process keeps filled, that process (PoolOwnerMeta).
//
// Nomad cannot rename a job, and a new version of a running job with
// other meta replaces its allocation (TestMetaUpdateReplacesTask), so
// taking a pool job touches neither. Instead:
//
//  1. a Nomad Variable agentkernel/claims/HEX is created with
//     check-and-set index 0: Nomad lets exactly one writer create it, so
//     one pool job is never taken twice;
//  2. the sandbox's name is claimed as every sandbox's is, by
//     registering the job agentkernel-NAME with EnforceIndex 0: here a
//     parameterized job, which Nomad never runs unless dispatched (its
//     task is /bin/true) and for which it makes no evaluation, whose
//     meta is the sandbox's (profile, network, labels, TTL, owner) plus
//     the pool job's ID (PooledJobMeta) and the node's name of its
//     sandbox (NodeNameMeta). When the name is taken, the claim is
//     deleted and the pool job goes back to the pool.
//
// Every lookup by name (Get, List, Wait, Exec, Remove, Reap) reads
// agentkernel-NAME and, when it carries PooledJobMeta, goes on to that
// job. Remove purges the pool job, then the name's job, then the claim.
//
// Leftovers: a process that keeps pools filled holds a lease, the
// Variable agentkernel/pool-owners/OWNER whose "until" it moves ahead
// while it runs (KeepLease). ReapPools purges the waiting jobs of pools
// whose owner's lease has lapsed (the process died, or stopped without
// draining), the jobs claimed by a sandbox that never got its name (a
// creation cut short) and the claims left by purged jobs.

// Meta keys and names of the warm pools.
const (
	// PoolMeta is the pool's name on its waiting jobs.
	PoolMeta = "agentkernel.pool"
	// PoolSpecMeta is the digest of the request a pool job was made
	// for (specDigest).
	PoolSpecMeta = "agentkernel.pool-spec"
	// PoolOwnerMeta is the process keeping the pool filled ("" for a
	// standing pool, which only Drain empties).
	PoolOwnerMeta = "agentkernel.pool-owner"
	// PooledJobMeta is, on a pooled sandbox's name job, the ID of the
	// pool job that runs it; NodeNameMeta its sandbox's name on the
	// node.
	PooledJobMeta = "agentkernel.job"
	NodeNameMeta  = "agentkernel.node-name"

	poolJobPrefix  = "agentkernel.pool-"
	claimVarPrefix = "agentkernel/claims/"
	leaseVarPrefix = "agentkernel/pool-owners/"

	// claimGrace is how long a claim may go without its name job
	// before ReapPools takes it for the leftover of a cut creation.
	claimGrace = time.Minute
)

// ErrPoolEmpty: no waiting job of the pool could be taken.
var ErrPoolEmpty = errors.New("the pool has no waiting job")

// Pool is a warm pool: Size jobs started from Request, waiting for
// sandboxes whose requests match it.
type Pool struct {
	// Name is a DNS label of at most MaxNameLen characters.
	Name string
	// Request is what each job runs: its Image, Profile, Network,
	// AllowDomains, MemoryMB and CPUMHz (its Name, TTL, Labels and Owner
	// are the taking sandbox's and are ignored here).
	Request Request
	Size    int
	// Owner, when set, is the process that keeps the pool filled (a
	// letters, digits, '-' and '_' id): its jobs are leftovers once its
	// lease has lapsed. "" is a standing pool.
	Owner string
}

func (p *Pool) check(driver string) error {
	if err := ValidName(p.Name); err != nil {
		return fmt.Errorf("pool name: %w", err)
	}
	if p.Size < 0 || p.Size > 1000 {
		return fmt.Errorf("pool size %d is out of range (0 to 1000)", p.Size)
	}
	if p.Owner != "" {
		if err := validOwner(p.Owner); err != nil {
			return err
		}
	}
	r := p.template()
	return r.Check(driver)
}

func validOwner(o string) error {
	if len(o) > 64 {
		return fmt.Errorf("pool owner %.20q… is too long", o)
	}
	if err := validNamespace(o); err != nil {
		return fmt.Errorf("pool owner: %w", err)
	}
	return nil
}

// template is the pool's request without what belongs to a sandbox.
func (p *Pool) template() Request {
	r := p.Request
	r.Name, r.TTL, r.Labels, r.Owner = "pool", 0, nil, ""
	return r
}

// specDigest is the digest of what a job of r runs, under the backend's
// settings: two requests of the same digest make the same job but for
// its names, meta and TTL.
func (b *Backend) specDigest(r *Request) string {
	// Memory as asked: 0 is the node profile's limit (and no --memory),
	// not the 256 MiB Nomad reserves for it.
	mem, cpu := r.MemoryMB, r.CPUMHz
	if cpu == 0 {
		cpu = 100
	}
	domains := slices.Clone(r.AllowDomains)
	slices.Sort(domains)
	o := b.jobOptions()
	v, _ := json.Marshal([]any{o.Driver, o.NodeAgentkernel, o.NodeDataDir, o.ExecCommand, o.Datacenters,
		r.Image, r.Profile, r.Network, domains, mem, cpu})
	sum := sha256.Sum256(v)
	return hex.EncodeToString(sum[:12])
}

// poolJob is the waiting job of p with suffix hex.
func (b *Backend) poolJob(p *Pool, hexid string) *api.Job {
	r := p.template()
	r.Name = "pool-" + hexid
	r.AllowDomains = slices.Clone(r.AllowDomains)
	slices.Sort(r.AllowDomains)
	job := buildJob(b.jobOptions(), &r, b.opts.Now())
	id := poolJobPrefix + hexid
	job.ID, job.Name = &id, &id
	job.Meta = map[string]string{
		ManagedMeta:  ManagedValue,
		PoolMeta:     p.Name,
		PoolSpecMeta: b.specDigest(&r),
		NodeNameMeta: r.Name,
		ProfileMeta:  r.Profile,
		NetworkMeta:  r.Network,
		DriverMeta:   b.opts.Driver,
	}
	if p.Owner != "" {
		job.Meta[PoolOwnerMeta] = p.Owner
	}
	return job
}

// poolHex is the HEX of a pool job's ID ("" for any other ID).
func poolHex(id string) string {
	h, ok := strings.CutPrefix(id, poolJobPrefix)
	if !ok || len(h) != 16 {
		return ""
	}
	if _, err := hex.DecodeString(h); err != nil {
		return ""
	}
	return h
}

// poolJobs lists the pool jobs (ours: ManagedMeta) of every pool.
func (b *Backend) poolJobs(ctx context.Context) ([]*api.JobListStub, error) {
	q := b.q(ctx)
	q.Prefix = poolJobPrefix
	jobs, _, err := b.client.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, q)
	if err != nil {
		return nil, b.apiError("list pool jobs", err)
	}
	out := jobs[:0]
	for _, j := range jobs {
		if j.Meta[ManagedMeta] == ManagedValue && poolHex(j.ID) != "" {
			out = append(out, j)
		}
	}
	return out, nil
}

// claims maps each claimed pool job's HEX to its claim.
func (b *Backend) claims(ctx context.Context) (map[string]*api.VariableMetadata, error) {
	vs, _, err := b.client.Variables().PrefixList(claimVarPrefix, b.q(ctx))
	if err != nil {
		return nil, b.apiError("list pool claims", err)
	}
	out := make(map[string]*api.VariableMetadata, len(vs))
	for _, v := range vs {
		if h, ok := strings.CutPrefix(v.Path, claimVarPrefix); ok {
			out[h] = v
		}
	}
	return out, nil
}

// Fill brings p to Size waiting jobs: its ended waiting jobs are purged
// and the missing ones registered. It does not wait for them to run
// (WaitPool does). It returns how many it registered.
func (b *Backend) Fill(ctx context.Context, p *Pool) (int, error) {
	if err := p.check(b.opts.Driver); err != nil {
		return 0, err
	}
	waiting, err := b.waiting(ctx, p, true)
	if err != nil {
		return 0, err
	}
	made := 0
	for have := len(waiting); have < p.Size; have++ {
		if _, err := b.registerPoolJob(ctx, p); err != nil {
			return made, err
		}
		made++
	}
	return made, nil
}

// registerPoolJob registers one waiting job of p.
func (b *Backend) registerPoolJob(ctx context.Context, p *Pool) (*api.Job, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	job := b.poolJob(p, hex.EncodeToString(id[:]))
	if _, _, err := b.client.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: 0}, b.w(ctx)); err != nil {
		return nil, b.apiError("register pool job", err)
	}
	return job, nil
}

// waiting is p's unclaimed, live jobs of p's current digest (its jobs
// of another digest, made before the backend's settings changed, are
// never taken); with purgeEnded, its unclaimed ended jobs are purged on
// the way.
func (b *Backend) waiting(ctx context.Context, p *Pool, purgeEnded bool) ([]*api.JobListStub, error) {
	jobs, err := b.poolJobs(ctx)
	if err != nil {
		return nil, err
	}
	claimed, err := b.claims(ctx)
	if err != nil {
		return nil, err
	}
	r := p.template()
	digest := b.specDigest(&r)
	var out []*api.JobListStub
	for _, j := range jobs {
		if j.Meta[PoolMeta] != p.Name || claimed[poolHex(j.ID)] != nil {
			continue
		}
		if j.Status == "dead" || j.Stop {
			if purgeEnded {
				_ = b.takeAndPurge(ctx, j.ID)
			}
			continue
		}
		if j.Meta[PoolSpecMeta] == digest {
			out = append(out, j)
		}
	}
	return out, nil
}

// Waiting counts p's jobs that wait for a sandbox.
func (b *Backend) Waiting(ctx context.Context, p *Pool) (int, error) {
	if err := p.check(b.opts.Driver); err != nil {
		return 0, err
	}
	w, err := b.waiting(ctx, p, false)
	return len(w), err
}

// WaitPool waits until n of p's waiting jobs answer (a command runs in
// their sandboxes), at most timeout.
func (b *Backend) WaitPool(ctx context.Context, p *Pool, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ready := map[string]bool{}
	for {
		w, err := b.waiting(ctx, p, false)
		if err != nil {
			return err
		}
		for _, j := range w {
			if ready[j.ID] {
				continue
			}
			a, err := b.runningAllocOf(ctx, j.ID)
			if err != nil || a == nil {
				continue
			}
			code, err := b.execIn(ctx, a, j.Meta[NodeNameMeta], b.execCommand(j.Meta[NodeNameMeta], []string{"true"}), false, nil, nil, nil)
			if err == nil && code == 0 {
				ready[j.ID] = true
			}
		}
		if len(ready) >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pool %s: %d of %d jobs answer: %w", p.Name, len(ready), n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Drain purges p's waiting jobs (each claimed first, so that no sandbox
// takes one while it goes).
func (b *Backend) Drain(ctx context.Context, p *Pool) error {
	if err := ValidName(p.Name); err != nil {
		return fmt.Errorf("pool name: %w", err)
	}
	jobs, err := b.poolJobs(ctx)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j.Meta[PoolMeta] != p.Name {
			continue
		}
		if err := b.takeAndPurge(ctx, j.ID); err != nil && !errors.Is(err, errClaimed) {
			return err
		}
	}
	return nil
}

var errClaimed = errors.New("the pool job is claimed")

// claim creates the claim of pool job id for sandbox (errClaimed when
// another has it).
func (b *Backend) claim(ctx context.Context, id, sandbox string) (*api.Variable, error) {
	return b.claimItems(ctx, id, api.VariableItems{"sandbox": sandbox})
}

// claimItems creates the claim of pool job id with items: "sandbox", the
// name of the sandbox taking it ("" to purge it), or "run", the owner
// whose one command runs in it (a job of its own pool, prepared ahead
// of that command; it is a leftover once that owner's lease lapses).
func (b *Backend) claimItems(ctx context.Context, id string, items api.VariableItems) (*api.Variable, error) {
	v := &api.Variable{Path: claimVarPrefix + poolHex(id), Items: items}
	got, _, err := b.client.Variables().CheckedCreate(v, b.w(ctx))
	if err != nil {
		var cas api.ErrCASConflict
		if errors.As(err, &cas) {
			return nil, errClaimed
		}
		return nil, b.apiError("claim pool job", err)
	}
	return got, nil
}

// takeAndPurge claims pool job id for no sandbox, then purges it and
// drops the claim.
func (b *Backend) takeAndPurge(ctx context.Context, id string) error {
	if _, err := b.claim(ctx, id, ""); err != nil {
		return err
	}
	return b.purgePoolJob(ctx, id)
}

// purgePoolJob purges pool job id and then its claim.
func (b *Backend) purgePoolJob(ctx context.Context, id string) error {
	if _, _, err := b.client.Jobs().Deregister(id, true, b.w(ctx)); err != nil && !isNotFound(err) {
		return b.apiError("purge pool job", err)
	}
	if _, err := b.client.Variables().Delete(claimVarPrefix+poolHex(id), b.w(ctx)); err != nil && !isNotFound(err) {
		return b.apiError("delete pool claim", err)
	}
	return nil
}

// Matches reports whether r's sandbox may be a job of p: same digest.
func (b *Backend) Matches(p *Pool, r *Request) bool {
	if p == nil {
		return false
	}
	t := p.template()
	return b.specDigest(&t) == b.specDigest(r)
}

// CreateFromPool creates r's sandbox by taking one of p's waiting jobs
// when p's request matches r's (Matches), else, or when none waits, as
// Create does. adopted says which. The sandbox's name is claimed as
// Create claims it: ErrExists when it is taken.
func (b *Backend) CreateFromPool(ctx context.Context, p *Pool, r *Request) (s *Sandbox, adopted bool, err error) {
	if err := r.Check(b.opts.Driver); err != nil {
		return nil, false, err
	}
	if p == nil || !b.Matches(p, r) {
		s, err := b.Create(ctx, r)
		return s, false, err
	}
	s, err = b.adopt(ctx, p, r)
	if errors.Is(err, ErrPoolEmpty) {
		s, err = b.Create(ctx, r)
		return s, false, err
	}
	return s, err == nil, err
}

func (b *Backend) adopt(ctx context.Context, p *Pool, r *Request) (*Sandbox, error) {
	w, err := b.waiting(ctx, p, false)
	if err != nil {
		return nil, err
	}
	return b.take(ctx, w, r)
}

// CreateMatching creates r's sandbox by taking a waiting job of any pool
// whose request matches r's (the same digest), whoever keeps it filled;
// ErrPoolEmpty when none waits.
func (b *Backend) CreateMatching(ctx context.Context, r *Request) (*Sandbox, error) {
	if err := r.Check(b.opts.Driver); err != nil {
		return nil, err
	}
	jobs, err := b.poolJobs(ctx)
	if err != nil {
		return nil, err
	}
	claimed, err := b.claims(ctx)
	if err != nil {
		return nil, err
	}
	digest := b.specDigest(r)
	var w []*api.JobListStub
	for _, j := range jobs {
		if j.Meta[PoolSpecMeta] == digest && j.Status == "running" && !j.Stop && claimed[poolHex(j.ID)] == nil {
			w = append(w, j)
		}
	}
	return b.take(ctx, w, r)
}

// take claims one of the waiting jobs w for r's sandbox and registers
// r's name job; ErrPoolEmpty when every one was claimed by another.
func (b *Backend) take(ctx context.Context, w []*api.JobListStub, r *Request) (*Sandbox, error) {
	// Running jobs first, the others after, each lot shuffled: adopters
	// at the same time mostly try different jobs.
	mrand.Shuffle(len(w), func(i, k int) { w[i], w[k] = w[k], w[i] })
	slices.SortStableFunc(w, func(x, y *api.JobListStub) int {
		rx, ry := x.Status == "running", y.Status == "running"
		switch {
		case rx && !ry:
			return -1
		case ry && !rx:
			return 1
		}
		return 0
	})
	for _, j := range w {
		if ValidName(j.Meta[NodeNameMeta]) != nil {
			continue
		}
		v, err := b.claim(ctx, j.ID, r.Name)
		if errors.Is(err, errClaimed) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// The job itself, not only its meta, must run r's sandbox.
		if err := b.verifyPoolJob(ctx, j.ID, r); err != nil {
			_, _ = b.client.Variables().CheckedDelete(v.Path, v.ModifyIndex, b.w(context.WithoutCancel(ctx)))
			if errors.Is(err, errNotThatJob) {
				continue
			}
			return nil, err
		}
		job := b.nameJob(r, j.ID, j.Meta[NodeNameMeta])
		if _, _, err := b.client.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: 0}, b.w(ctx)); err != nil {
			// The job goes back to the pool.
			_, _ = b.client.Variables().CheckedDelete(v.Path, v.ModifyIndex, b.w(context.WithoutCancel(ctx)))
			if strings.Contains(err.Error(), "Enforcing job modify index") {
				return nil, fmt.Errorf("sandbox %q: %w (remove it first)", r.Name, ErrExists)
			}
			return nil, b.apiError("register job", err)
		}
		s := sandboxOf(job.Meta, JobID(r.Name), j.Status, 0)
		return &s, nil
	}
	return nil, ErrPoolEmpty
}

// nameJob is the job that holds a pooled sandbox's name: parameterized
// (Nomad runs it only when dispatched, and then it runs /bin/true), its
// meta the sandbox's and the pool job's.
func (b *Backend) nameJob(r *Request, poolJobID, nodeName string) *api.Job {
	job := buildJob(b.jobOptions(), r, b.opts.Now())
	job.ParameterizedJob = &api.ParameterizedJobConfig{}
	t := job.TaskGroups[0].Tasks[0]
	t.Config = map[string]any{"command": "/bin/true"}
	t.Env = nil
	mem, cpu := 16, 10
	t.Resources = &api.Resources{CPU: &cpu, MemoryMB: &mem}
	job.TaskGroups[0].Networks = nil
	job.Meta[PooledJobMeta] = poolJobID
	job.Meta[NodeNameMeta] = nodeName
	return job
}

// target is where name's sandbox runs: its job's ID and its sandbox's
// name on the node (for a pooled sandbox, the pool job's), with its
// name job.
func (b *Backend) target(ctx context.Context, name string) (jobID, node string, j *api.Job, err error) {
	j, _, err = b.client.Jobs().Info(JobID(name), b.q(ctx))
	if err != nil {
		if isNotFound(err) {
			return "", "", nil, fmt.Errorf("sandbox %q: %w", name, ErrNotFound)
		}
		return "", "", nil, b.apiError("read job", err)
	}
	if j.Meta[ManagedMeta] != ManagedValue {
		return "", "", nil, fmt.Errorf("sandbox %q: %w (job %s is not agentkernel's)", name, ErrNotFound, JobID(name))
	}
	if pj := j.Meta[PooledJobMeta]; pj != "" {
		if poolHex(pj) == "" || ValidName(j.Meta[NodeNameMeta]) != nil {
			return "", "", nil, fmt.Errorf("sandbox %q: job %s names no pool job of ours", name, JobID(name))
		}
		return pj, j.Meta[NodeNameMeta], j, nil
	}
	return JobID(name), name, j, nil
}

// runningAllocOf is job id's running allocation, nil when none runs.
func (b *Backend) runningAllocOf(ctx context.Context, id string) (*api.Allocation, error) {
	allocs, _, err := b.client.Jobs().Allocations(id, false, b.q(ctx))
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, b.apiError("list allocations", err)
	}
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusRunning {
			return &api.Allocation{ID: a.ID, NodeID: a.NodeID, Namespace: a.Namespace}, nil
		}
	}
	return nil, nil
}

// KeepLease writes owner's lease (valid until now+ttl) and moves it
// ahead every ttl/3 until ctx ends; it returns after the first write,
// with its error.
func (b *Backend) KeepLease(ctx context.Context, owner string, ttl time.Duration) error {
	if err := validOwner(owner); err != nil {
		return err
	}
	write := func() error {
		v := &api.Variable{Path: leaseVarPrefix + owner, Items: api.VariableItems{"until": b.opts.Now().Add(ttl).UTC().Format(time.RFC3339)}}
		_, _, err := b.client.Variables().Create(v, b.w(ctx))
		return err
	}
	if err := write(); err != nil {
		return b.apiError("write pool lease", err)
	}
	go func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = write()
			}
		}
	}()
	return nil
}

// DropLease deletes owner's lease (its pools' jobs are leftovers then).
func (b *Backend) DropLease(ctx context.Context, owner string) error {
	if err := validOwner(owner); err != nil {
		return err
	}
	if _, err := b.client.Variables().Delete(leaseVarPrefix+owner, b.w(ctx)); err != nil && !isNotFound(err) {
		return b.apiError("delete pool lease", err)
	}
	return nil
}

// leaseLive reports whether owner's lease has not lapsed.
func (b *Backend) leaseLive(ctx context.Context, owner string) (bool, error) {
	v, _, err := b.client.Variables().Peek(leaseVarPrefix+owner, b.q(ctx))
	if err != nil {
		return false, b.apiError("read pool lease", err)
	}
	if v == nil {
		return false, nil
	}
	t, err := time.Parse(time.RFC3339, v.Items["until"])
	return err == nil && b.opts.Now().Before(t), nil
}

// ReapPools removes the pools' leftovers, and returns the pool jobs it
// purged: waiting jobs whose owner's lease has lapsed or that ended,
// claimed jobs whose sandbox never got its name (after claimGrace), and
// claims of jobs that are gone.
func (b *Backend) ReapPools(ctx context.Context) ([]string, error) {
	jobs, err := b.poolJobs(ctx)
	if err != nil {
		return nil, err
	}
	claimed, err := b.claims(ctx)
	if err != nil {
		return nil, err
	}
	now := b.opts.Now()
	live := map[string]bool{}
	var gone []string
	for _, j := range jobs {
		h := poolHex(j.ID)
		live[h] = true
		if c := claimed[h]; c != nil {
			if now.Sub(time.Unix(0, c.CreateTime)) < claimGrace {
				continue
			}
			v, _, err := b.client.Variables().Peek(c.Path, b.q(ctx))
			if err != nil || v == nil {
				continue
			}
			if o := v.Items["run"]; o != "" {
				// A run's: a leftover once its owner's lease lapsed.
				if validOwner(o) != nil {
					continue
				}
				if ok, err := b.leaseLive(ctx, o); err != nil || ok {
					continue
				}
			}
			name := v.Items["sandbox"]
			if name != "" {
				nj, _, err := b.client.Jobs().Info(JobID(name), b.q(ctx))
				if err == nil && nj.Meta[PooledJobMeta] == j.ID {
					continue // a sandbox's
				}
				if err != nil && !isNotFound(err) {
					continue
				}
			}
			if err := b.purgePoolJob(ctx, j.ID); err != nil {
				return gone, err
			}
			gone = append(gone, j.ID)
			continue
		}
		leftover := j.Status == "dead" || j.Stop
		if o := j.Meta[PoolOwnerMeta]; !leftover && o != "" {
			ok, err := b.leaseLive(ctx, o)
			if err != nil {
				return gone, err
			}
			leftover = !ok
		}
		if !leftover {
			continue
		}
		if err := b.takeAndPurge(ctx, j.ID); err != nil {
			if errors.Is(err, errClaimed) {
				continue
			}
			return gone, err
		}
		gone = append(gone, j.ID)
	}
	for h, c := range claimed {
		if !live[h] && now.Sub(time.Unix(0, c.CreateTime)) >= claimGrace {
			_, _ = b.client.Variables().CheckedDelete(c.Path, c.ModifyIndex, b.w(ctx))
		}
	}
	return gone, nil
}

var errNotThatJob = errors.New("the pool job does not run the request's sandbox")

// verifyPoolJob checks that pool job id runs what a pool job made for r
// runs: the same driver, command line, environment, resources and
// network mode (its meta could say anything).
func (b *Backend) verifyPoolJob(ctx context.Context, id string, r *Request) error {
	got, _, err := b.client.Jobs().Info(id, b.q(ctx))
	if err != nil {
		if isNotFound(err) {
			return errNotThatJob
		}
		return b.apiError("read pool job", err)
	}
	want := b.poolJob(&Pool{Name: "verify", Request: *r}, poolHex(id))
	if len(got.TaskGroups) != 1 || len(got.TaskGroups[0].Tasks) != 1 || got.ParameterizedJob != nil || got.Periodic != nil {
		return errNotThatJob
	}
	gg, wg := got.TaskGroups[0], want.TaskGroups[0]
	gt, wt := gg.Tasks[0], wg.Tasks[0]
	same := func(x, y any) bool {
		a, err1 := json.Marshal(x)
		c, err2 := json.Marshal(y)
		return err1 == nil && err2 == nil && string(a) == string(c)
	}
	if gt.Driver != wt.Driver || !same(gt.Config, wt.Config) || !same(gt.Env, wt.Env) || gt.User != wt.User ||
		gt.Resources == nil || gt.Resources.MemoryMB == nil || gt.Resources.CPU == nil ||
		*gt.Resources.MemoryMB != *wt.Resources.MemoryMB || *gt.Resources.CPU != *wt.Resources.CPU ||
		got.Meta[NodeNameMeta] != want.Meta[NodeNameMeta] {
		return errNotThatJob
	}
	mode := func(ns []*api.NetworkResource) string {
		if len(ns) == 0 {
			return ""
		}
		return ns[0].Mode
	}
	if b.opts.Driver == DriverExec && mode(gg.Networks) != mode(wg.Networks) {
		return errNotThatJob
	}
	return nil
}
