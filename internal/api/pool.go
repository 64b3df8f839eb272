package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Warm pools (fast:true, the default of /run, /run/stream, /batch/run).
//
// A pool holds prepared sandboxes (sandbox.Prepared): built up to the
// start of their command — namespaces, cgroup, root filesystem, mounts,
// seccomp filter — and waiting. A request takes one, gives it its
// command, and the sandbox is torn down when the command ends, exactly
// as an ephemeral run's; a fresh one refills the pool in the background.
// No request ever sees another's files or processes. A request that finds
// its pool empty does not wait for a preparation: it runs in a fresh
// ephemeral sandbox, as fast:false does, and the pool grows.
//
// The rule for which requests a pool serves is simple: the request's
// spec is resolved exactly as for an ephemeral run, and the pool key is
// that whole spec minus the command (backend, image, profile, mounts,
// env, workdir, user, network, resources, timeout, security). Every
// backend that is a sandbox.Preparer has pools: native (sandboxes built
// up to the command's exec), gvisor, docker and podman (a booted
// sandbox whose idle PID 1 waits, the command run beside it as an exec;
// package bootprep). Requests whose specs are
// equal share a pool, so a pooled sandbox always matches the request.
// Specs that need a terminal or keep their layer take the ephemeral path,
// as do new keys once maxPools pools exist.
//
// Sizing: each key keeps at least [daemon] min_warm sandboxes (1 when
// unset) and at most [daemon] max_warm (8 when unset); a request that
// finds its pool empty raises that key's target by one (up to max_warm),
// so the pool grows to the load it sees, and a minute without such a
// miss lowers it by one again (not below min_warm or the prewarm count). At most maxFilling sandboxes are
// prepared at once, all pools together.
//
// Eviction: a pool no request took from for poolIdle is discarded, and a
// new key beyond maxPools evicts the least recently used pool. Pools
// filled on purpose (prewarm, [daemon] min_warm at start) are pinned:
// never evicted.

// maxPools bounds the number of keys (pools) at once; maxFilling the
// sandboxes being prepared at once (refills must not starve requests).
const (
	maxPools   = 16
	maxFilling = 2
)

// refillDelay is how long a taken sandbox's replacement waits for the
// command to end at most.
const refillDelay = 100 * time.Millisecond

// poolIdle is how long an unpinned pool lives without a request;
// idleCheck how often that is checked; poolShrink how long a pool must
// go without a miss before its target steps down by one (per check)
// towards its floor, so that a burst does not keep max_warm sandboxes
// warm for good.
var (
	poolIdle   = 10 * time.Minute
	idleCheck  = time.Minute
	poolShrink = time.Minute
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
	mode    string
	tmpl    *sandbox.Spec
	ready   []sandbox.Prepared
	filling int // preparations in flight
	taken   int // taken sandboxes whose commands still run (refilled after)
	target  int
	// floor is what target shrinks back to: min_warm, or the prewarm
	// count; lastGrown is the last miss (or prewarm) that raised it.
	floor     int
	lastGrown time.Time
	failed    time.Time // last preparation failure (back off)

	lastUsed time.Time // last take (or creation)
	pinned   bool      // prewarmed: never evicted
	evicted  bool      // no longer in byKey: preparations finishing are discarded
}

type pools struct {
	m    *sandbox.Manager
	opts PoolOptions
	log  func(msg string, args ...any)

	mu     sync.Mutex
	byKey  map[string]*warmPool
	closed bool
	// shrinkAfter is poolShrink, read when the pools were made.
	shrinkAfter time.Duration
	// filling counts preparations in flight, all pools together.
	filling int
	// bg counts background preparations.
	bg sync.WaitGroup
	// ctx is cancelled at close (stops preparations in flight).
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
	p := &pools{m: m, opts: o, log: log, byKey: map[string]*warmPool{}, shrinkAfter: poolShrink, ctx: ctx, cancel: cancel}
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		t := time.NewTicker(idleCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				p.evictIdle()
			}
		}
	}()
	return p
}

// evictIdle discards the unpinned pools no request used for poolIdle,
// and lets the others' targets step down towards their floors.
func (p *pools) evictIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, wp := range p.byKey {
		switch {
		case !wp.pinned && time.Since(wp.lastUsed) > poolIdle:
			p.evictLocked(wp)
		case wp.target > wp.floor && time.Since(wp.lastGrown) > p.shrinkAfter:
			wp.target--
			wp.lastGrown = time.Now()
			if n := len(wp.ready); n > 0 && n+wp.filling+wp.taken > wp.target {
				sb := wp.ready[n-1]
				wp.ready = wp.ready[:n-1]
				p.bg.Add(1)
				go func() { defer p.bg.Done(); sb.Close() }()
			}
		}
	}
}

// evictLocked removes wp and discards its ready sandboxes.
func (p *pools) evictLocked(wp *warmPool) {
	delete(p.byKey, wp.key)
	wp.evicted, wp.target = true, 0
	for _, sb := range wp.ready {
		p.bg.Add(1)
		go func() { defer p.bg.Done(); sb.Close() }()
	}
	wp.ready = nil
}

// makeRoomLocked evicts the least recently used unpinned pool when
// maxPools exist; false when all are pinned.
func (p *pools) makeRoomLocked() bool {
	if len(p.byKey) < maxPools {
		return true
	}
	var lru *warmPool
	for _, wp := range p.byKey {
		if !wp.pinned && (lru == nil || wp.lastUsed.Before(lru.lastUsed)) {
			lru = wp
		}
	}
	if lru == nil {
		return false
	}
	p.evictLocked(lru)
	return true
}

// maxPooledArgs bounds the argv (as JSON) a pooled sandbox is handed.
const maxPooledArgs = 32 << 10

// poolable reports whether a pooled sandbox can run spec exactly as an
// ephemeral run would.
func poolable(spec *sandbox.Spec) bool {
	// Published ports are bound by one sandbox at a time: two warm
	// sandboxes of the spec could not both hold them.
	// Secrets are made per run (their CA, their values), and are not
	// part of the pool's key.
	if spec.TTY || spec.Interactive || spec.Keep || len(spec.Args) == 0 || len(spec.Network.Ports) > 0 || spec.Secrets != nil || spec.SecretBindings != nil {
		return false
	}
	n := 0
	for _, a := range spec.Args {
		n += len(a) + 8
	}
	return n <= maxPooledArgs
}

// preparable reports whether backend ("" is native) can prepare
// sandboxes ahead of their command: only its requests take pools.
func (p *pools) preparable(backend string) bool {
	b, err := p.m.Backend(backend)
	if err != nil {
		return false
	}
	_, ok := b.(sandbox.Preparer)
	return ok
}

// poolKey is the spec minus what differs per request (the backend is
// part of it: each backend's sandboxes are pooled apart).
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

// take returns a prepared sandbox for spec, or nil when the caller must
// run spec ephemerally. why is "hit", "miss" (pool empty) or
// "unpoolable" (a command spec.Commands refuses included: it takes no
// sandbox, and the caller's run refuses it). The caller calls done once
// its command has ended. While the pool still holds a ready sandbox,
// only then (or after refillDelay) is the taken one replaced: building
// its successor (a Go process start, namespaces, cgroup writes) competes
// for the CPU with the command being served and, on a small machine,
// stalls a warm run's exec stage (docs/perf-log.md, the daemon entries).
// An emptied pool is refilled at once.
func (p *pools) take(spec *sandbox.Spec) (sb sandbox.Prepared, why string, done func()) {
	done = func() {}
	if !poolable(spec) || spec.Commands.Check(spec.Args) != nil {
		return nil, "unpoolable", done
	}
	key, err := poolKey(spec)
	if err != nil {
		return nil, "unpoolable", done
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, "unpoolable", done
	}
	wp := p.byKey[key]
	if wp == nil {
		if !p.makeRoomLocked() {
			return nil, "unpoolable", done
		}
		wp = p.newPoolLocked(key, spec)
	}
	wp.lastUsed = time.Now()
	n := len(wp.ready)
	if n == 0 {
		// Empty: this request runs ephemerally (cheaper than waiting
		// for a preparation) while the pool grows towards the load.
		if wp.target < p.opts.MaxWarm {
			wp.target++
		}
		wp.lastGrown = time.Now()
		p.refillLocked(wp)
		return nil, "miss", done
	}
	sb = wp.ready[0]
	wp.ready = slices.Delete(wp.ready, 0, 1)
	if len(wp.ready) == 0 {
		// The pool is empty now: its next request must not wait.
		p.refillLocked(wp)
		return sb, "hit", done
	}
	wp.taken++
	var once sync.Once
	done = func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			wp.taken--
			p.refillLocked(wp)
		})
	}
	// A long command does not hold its replacement back for long.
	time.AfterFunc(refillDelay, done)
	return sb, "hit", done
}

func (p *pools) newPoolLocked(key string, spec *sandbox.Spec) *warmPool {
	tmpl := *spec
	tmpl.ID, tmpl.Name, tmpl.Args = "", "", nil
	wp := &warmPool{key: key, image: spec.Image, profile: spec.Profile, mode: spec.Mode, tmpl: &tmpl, target: p.opts.MinWarm, floor: p.opts.MinWarm, lastUsed: time.Now()}
	p.byKey[key] = wp
	return wp
}

// refillLocked starts preparations until ready+filling reaches the target.
func (p *pools) refillLocked(wp *warmPool) {
	if p.closed || time.Since(wp.failed) < time.Second {
		return
	}
	for len(wp.ready)+wp.filling+wp.taken < wp.target && p.filling < maxFilling {
		wp.filling++
		p.filling++
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			sb, err := p.create(p.ctx, wp)
			p.mu.Lock()
			defer p.mu.Unlock()
			wp.filling--
			p.filling--
			defer p.refillAllLocked()
			if err != nil {
				wp.failed = time.Now()
				if !p.closed {
					p.log("warm pool: preparing a sandbox failed", "image", wp.image, "profile", wp.profile, "error", err)
				}
				return
			}
			if p.closed || wp.evicted {
				p.bg.Add(1)
				go func() { defer p.bg.Done(); sb.Close() }()
				return
			}
			wp.ready = append(wp.ready, sb)
		}()
	}
}

// refillAllLocked lets pools waiting for a preparation slot go on.
func (p *pools) refillAllLocked() {
	for _, wp := range p.byKey {
		if p.filling >= maxFilling {
			return
		}
		p.refillLocked(wp)
	}
}

// create prepares one sandbox from the pool's template.
func (p *pools) create(ctx context.Context, wp *warmPool) (sandbox.Prepared, error) {
	p.mu.Lock()
	spec := *wp.tmpl
	p.mu.Unlock()
	spec.Mounts = slices.Clone(spec.Mounts)
	spec.Env = slices.Clone(spec.Env)
	sb, err := p.m.Prepare(ctx, spec.Backend, &spec)
	if err != nil {
		return nil, err
	}
	// Later preparations reuse the resolved root filesystem.
	p.mu.Lock()
	if len(wp.tmpl.Rootfs.Layers) == 0 && !wp.tmpl.Rootfs.Host {
		wp.tmpl.Rootfs = spec.Rootfs
	}
	p.mu.Unlock()
	return sb, nil
}

// prewarm creates the pool of spec (if new) and fills it to count
// sandboxes, or to min_warm when count is 0 (capped by max_warm).
func (p *pools) prewarm(spec *sandbox.Spec, count int) error {
	if spec.TTY || spec.Interactive || spec.Keep {
		return fmt.Errorf("a spec with a terminal or a kept layer cannot be pooled")
	}
	if len(spec.Network.Ports) > 0 {
		return fmt.Errorf("a spec with published ports cannot be pooled: one sandbox at a time can hold them")
	}
	c := *spec
	if len(c.Args) == 0 {
		c.Args = []string{"true"}
	}
	key, err := poolKey(&c)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("the server is stopping")
	}
	wp := p.byKey[key]
	if wp == nil {
		if !p.makeRoomLocked() {
			return fmt.Errorf("at most %d pools exist at once, all prewarmed", maxPools)
		}
		wp = p.newPoolLocked(key, &c)
	}
	wp.pinned = true
	if count > 0 {
		wp.target = max(wp.target, min(count, p.opts.MaxWarm))
		wp.floor = max(wp.floor, min(count, p.opts.MaxWarm))
	}
	wp.failed = time.Time{}
	p.refillLocked(wp)
	return nil
}

// poolSize is the ready count of the pools of one backend, image,
// profile and mode, for /status and /metrics (backend "native" for the
// Manager's own).
type poolSize struct {
	backend, image, profile, mode string
	ready                         int
}

func (p *pools) sizes() []poolSize {
	p.mu.Lock()
	defer p.mu.Unlock()
	sum := map[[4]string]int{}
	for _, wp := range p.byKey {
		backend := wp.tmpl.Backend
		if backend == "" {
			backend = "native"
		}
		sum[[4]string{backend, wp.image, wp.profile, wp.mode}] += len(wp.ready)
	}
	out := make([]poolSize, 0, len(sum))
	for k, n := range sum {
		out = append(out, poolSize{k[0], k[1], k[2], k[3], n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].backend != out[j].backend {
			return out[i].backend < out[j].backend
		}
		if out[i].image != out[j].image {
			return out[i].image < out[j].image
		}
		if out[i].profile != out[j].profile {
			return out[i].profile < out[j].profile
		}
		return out[i].mode < out[j].mode
	})
	return out
}

// close stops refills, discards every ready sandbox and waits for the
// preparations in flight (cancelled).
func (p *pools) close() {
	p.mu.Lock()
	p.closed = true
	var ready []sandbox.Prepared
	for _, wp := range p.byKey {
		ready = append(ready, wp.ready...)
		wp.ready = nil
	}
	p.mu.Unlock()
	p.cancel()
	var wg sync.WaitGroup
	for _, sb := range ready {
		wg.Go(sb.Close)
	}
	wg.Wait()
	p.bg.Wait()
}
