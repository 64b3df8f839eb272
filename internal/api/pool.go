package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Warm pools (fast:true, the default of /run, /run/stream, /batch/run).
//
// A pool holds pre-started persistent sandboxes, hidden from GET
// /sandboxes (name pool-<hex>, label agentkernel.pool=1). A request takes
// one, runs its command with Exec, and the sandbox is removed in the
// background while a fresh one refills the pool: no request ever sees
// another's files or processes. A request that finds its pool empty does
// not wait for a creation: it runs in a fresh ephemeral sandbox, as
// fast:false does, and the pool grows.
//
// The rule for which requests a pool serves is simple: the request's
// spec is resolved exactly as for an ephemeral run, and the pool key is
// that whole spec minus the command (image, profile, mounts, env, workdir,
// user, network, resources, security). Requests whose specs are equal
// share a pool, so a pooled sandbox always matches the request. Specs a
// long-lived sandbox cannot honour the way a run does — a run timeout
// ([resources] timeout), a terminal, kept layers — take the ephemeral
// path, as do new keys once maxPools pools exist.
//
// Sizing: each key keeps at least [daemon] min_warm sandboxes (1 when
// unset) and at most [daemon] max_warm (8 when unset); a request that
// finds its pool empty raises that key's target by one (up to max_warm),
// so the pool grows to the load it sees. At most maxFilling sandboxes are
// created at once, all pools together.

// PoolLabel marks the sandboxes of the warm pools (hidden from
// Manager.List unless asked for).
const PoolLabel = sandbox.PoolLabel

// maxPools bounds the number of keys (pools) at once; maxFilling the
// sandboxes being created at once (refills must not starve requests).
const (
	maxPools   = 16
	maxFilling = 2
)

// PoolOptions configures the warm pools.
type PoolOptions struct {
	// MinWarm and MaxWarm bound each pool (defaults 1 and 8).
	MinWarm int
	MaxWarm int
	// Prewarm, when set, fills the pool of the default image and
	// profile (a request with no image, profile or command) at start.
	Prewarm bool
}

type warmPool struct {
	key     string
	image   string
	profile string
	tmpl    *sandbox.Spec
	ready   []string // started sandboxes, ready to take
	filling int      // creations in flight
	target  int
	failed  time.Time // last creation failure (back off)
}

type pools struct {
	m    *sandbox.Manager
	opts PoolOptions
	log  func(msg string, args ...any)

	mu     sync.Mutex
	byKey  map[string]*warmPool
	closed bool
	// filling counts creations in flight, all pools together.
	filling int
	// bg counts background work (creations, removals).
	bg sync.WaitGroup
	// ctx is cancelled at close (stops creations in flight).
	ctx    context.Context
	cancel context.CancelFunc
}

func newPools(m *sandbox.Manager, o PoolOptions, log func(string, ...any)) *pools {
	if o.MinWarm <= 0 {
		o.MinWarm = 1
	}
	if o.MaxWarm <= 0 {
		o.MaxWarm = 8
	}
	if o.MaxWarm < o.MinWarm {
		o.MaxWarm = o.MinWarm
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &pools{m: m, opts: o, log: log, byKey: map[string]*warmPool{}, ctx: ctx, cancel: cancel}
}

// poolable reports whether a pooled sandbox can run spec exactly as an
// ephemeral run would.
func poolable(spec *sandbox.Spec) bool {
	return spec.Resources.Timeout == 0 && !spec.TTY && !spec.Interactive && !spec.Keep && len(spec.Args) > 0
}

// poolKey is the spec minus what differs per request.
func poolKey(spec *sandbox.Spec) (string, error) {
	c := *spec
	c.ID, c.Name, c.Args, c.ImageRule = "", "", nil, ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

func poolName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "pool-" + hex.EncodeToString(b[:])
}

// take returns a started pool sandbox for spec and a release func that
// discards it; name is "" when the caller must run spec ephemerally.
// why is "hit", "miss" (pool empty) or "unpoolable".
func (p *pools) take(spec *sandbox.Spec) (name string, release func(), why string) {
	if !poolable(spec) {
		return "", nil, "unpoolable"
	}
	key, err := poolKey(spec)
	if err != nil {
		return "", nil, "unpoolable"
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return "", nil, "unpoolable"
	}
	wp := p.byKey[key]
	if wp == nil {
		if len(p.byKey) >= maxPools {
			p.mu.Unlock()
			return "", nil, "unpoolable"
		}
		tmpl := *spec
		tmpl.ID, tmpl.Name, tmpl.Args = "", "", nil
		wp = &warmPool{key: key, image: spec.Image, profile: spec.Profile, tmpl: &tmpl, target: p.opts.MinWarm}
		p.byKey[key] = wp
	}
	n := len(wp.ready)
	if n == 0 {
		// Empty: this request runs ephemerally (cheaper than creating,
		// starting and removing a sandbox in its path) while the pool
		// grows towards the load.
		if wp.target < p.opts.MaxWarm {
			wp.target++
		}
		p.refillLocked(wp)
		p.mu.Unlock()
		return "", nil, "miss"
	}
	name = wp.ready[n-1]
	wp.ready = wp.ready[:n-1]
	p.bg.Add(1) // the sandbox taken until released
	p.refillLocked(wp)
	p.mu.Unlock()
	release = func() {
		go func() {
			defer p.bg.Done()
			p.remove(name)
		}()
	}
	return name, release, "hit"
}

// refillLocked starts creations until ready+filling reaches the target.
func (p *pools) refillLocked(wp *warmPool) {
	if p.closed || time.Since(wp.failed) < time.Second {
		return
	}
	for len(wp.ready)+wp.filling < wp.target && p.filling < maxFilling {
		wp.filling++
		p.filling++
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			name, err := p.create(p.ctx, wp)
			p.mu.Lock()
			defer p.mu.Unlock()
			wp.filling--
			p.filling--
			defer p.refillAllLocked()
			if err != nil {
				wp.failed = time.Now()
				if !p.closed {
					p.log("warm pool: creating a sandbox failed", "image", wp.image, "profile", wp.profile, "error", err)
				}
				return
			}
			if p.closed {
				p.bg.Add(1)
				go func() { defer p.bg.Done(); p.remove(name) }()
				return
			}
			wp.ready = append(wp.ready, name)
		}()
	}
}

// refillAllLocked lets pools waiting for a creation slot go on.
func (p *pools) refillAllLocked() {
	for _, wp := range p.byKey {
		if p.filling >= maxFilling {
			return
		}
		p.refillLocked(wp)
	}
}

// create makes and starts one pool sandbox from the pool's template.
func (p *pools) create(ctx context.Context, wp *warmPool) (string, error) {
	p.mu.Lock()
	spec := *wp.tmpl
	p.mu.Unlock()
	spec.Mounts = slices.Clone(spec.Mounts)
	spec.Env = slices.Clone(spec.Env)
	name := poolName()
	_, _, err := p.m.Create(ctx, sandbox.CreateRequest{Name: name, Spec: &spec, Start: true,
		Labels: map[string]string{PoolLabel: "1"}, Description: "warm pool"})
	if err != nil {
		p.remove(name)
		return "", err
	}
	// Later creations reuse the prepared root filesystem.
	p.mu.Lock()
	if len(wp.tmpl.Rootfs.Layers) == 0 && !wp.tmpl.Rootfs.Host {
		wp.tmpl.Rootfs = spec.Rootfs
	}
	p.mu.Unlock()
	return name, nil
}

// remove discards a pool sandbox (errors only logged: GC collects it).
func (p *pools) remove(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.m.Remove(ctx, name, true); err != nil && !errors.Is(err, sandbox.ErrSandboxNotFound) {
		p.log("warm pool: removing a sandbox failed", "name", name, "error", err)
	}
}

// prewarm creates the pool of spec and fills it to min_warm.
func (p *pools) prewarm(spec *sandbox.Spec) {
	if !poolable(spec) {
		return
	}
	key, err := poolKey(spec)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.byKey[key] != nil || len(p.byKey) >= maxPools {
		return
	}
	tmpl := *spec
	tmpl.ID, tmpl.Name, tmpl.Args = "", "", nil
	wp := &warmPool{key: key, image: spec.Image, profile: spec.Profile, tmpl: &tmpl, target: p.opts.MinWarm}
	p.byKey[key] = wp
	p.refillLocked(wp)
}

// poolSize is one pool's ready count for /metrics.
type poolSize struct {
	image, profile string
	ready          int
}

func (p *pools) sizes() []poolSize {
	p.mu.Lock()
	defer p.mu.Unlock()
	sum := map[[2]string]int{}
	for _, wp := range p.byKey {
		sum[[2]string{wp.image, wp.profile}] += len(wp.ready)
	}
	out := make([]poolSize, 0, len(sum))
	for k, n := range sum {
		out = append(out, poolSize{k[0], k[1], n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].image != out[j].image {
			return out[i].image < out[j].image
		}
		return out[i].profile < out[j].profile
	})
	return out
}

// close stops refills, removes every ready sandbox and waits for the
// background work (creations in flight are cancelled, taken sandboxes
// are removed by their requests' release).
func (p *pools) close() {
	p.mu.Lock()
	p.closed = true
	var names []string
	for _, wp := range p.byKey {
		names = append(names, wp.ready...)
		wp.ready = nil
	}
	p.mu.Unlock()
	p.cancel()
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() { p.remove(n) })
	}
	wg.Wait()
	p.bg.Wait()
}
