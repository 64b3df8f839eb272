package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Sandboxes are persistent sandboxes as pods, for a sandbox.Manager: its
// Store, Supervisor, Connector and HostStats. A sandbox's record (its
// sandbox.Info and Spec) is a Secret of its namespace (records.go), so
// that every server of the namespace sees the same sandboxes and a
// server's restart loses none; the sandbox runs while its pod runs.
// Start makes the pod (and its NetworkPolicy) and waits until it runs,
// Stop and Remove delete them: a pod's files do not outlive it, so a
// stopped sandbox starts again from its image. Commands and file
// operations go through the cluster's exec API (conn.go). No process of
// this machine holds a running sandbox: the cluster does.
type Sandboxes struct {
	b *Backend
	// dir held the records before they were kept in the cluster
	// (MigrateLocal).
	dir string
	// StartTimeout bounds the wait for a starting pod
	// (DefaultStartTimeout).
	StartTimeout time.Duration
	// MaxSandboxes > 0 caps the sandboxes recorded in the namespace, by
	// every server together ([orchestrator] max_sandboxes).
	MaxSandboxes int64

	// id tells this server's start claims from others' (records.go).
	id string

	// names orders this server's Start, Stop and Remove of one sandbox.
	names keyedLocks
	// detaching makes detached starts in one sandbox go one at a time,
	// so that the count of running ones is not outrun (detached.go).
	detaching keyedLocks
}

// keyedLocks is a mutex per key, held only while some caller holds or
// waits for it: a key's entry goes with its last user, so the map
// never holds more keys than there are callers at that moment. The
// zero value is ready to use.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int
}

// lock holds key's lock until the returned function is called.
func (k *keyedLocks) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// len is how many keys have an entry.
func (k *keyedLocks) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}

// NewSandboxes keeps the records of b's sandboxes in b's namespace;
// dataDir is where an earlier version kept them
// (dataDir/kubernetes/<namespace>/, MigrateLocal). It makes no API call.
func NewSandboxes(b *Backend, dataDir string) *Sandboxes {
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &Sandboxes{b: b, dir: filepath.Join(dataDir, "kubernetes", b.Namespace()), id: hex.EncodeToString(id[:])}
}

// lock holds name's lock until the returned function is called.
func (s *Sandboxes) lock(name string) func() { return s.names.lock(name) }

// status fills info's Status (and StopReason) from its pod.
func (s *Sandboxes) status(ctx context.Context, info *sandbox.Info) error {
	sb, err := s.b.Get(ctx, info.Name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		sb = nil
	}
	statusFrom(info, sb)
	return nil
}

// statusFrom sets info's Status (and StopReason) from its pod (nil: none).
func statusFrom(info *sandbox.Info, sb *Sandbox) {
	switch {
	case sb == nil:
		if info.Status == sandbox.StatusRunning {
			info.StopReason = "its pod is gone"
		}
		info.Status = sandbox.StatusStopped
	case sb.Phase == corev1.PodRunning && !sb.Removing:
		info.Status = sandbox.StatusRunning
		info.StopReason = ""
	default:
		if info.Status == sandbox.StatusRunning {
			info.StopReason = "its pod is " + strings.ToLower(string(sb.Phase))
		}
		info.Status = sandbox.StatusStopped
	}
}

// Create records a new, stopped sandbox (sandbox.Store): the name must
// be a DNS label, spec must be one a pod can carry out. The record's
// creation is what claims the name, across every server of the
// namespace (sandbox.ErrSandboxExists when it is taken).
//
// max_sandboxes: a record is created, then the records are counted; a
// creator that finds more than the cap withdraws its own. Of creators
// racing, the last to count sees every record kept before it, so the cap
// is never exceeded; one that withdrew tries again after a random pause
// while the count leaves room (capAttempts in all), so that a burst of
// creators does not leave every one of them out.
func (s *Sandboxes) Create(ctx context.Context, info *sandbox.Info, spec *sandbox.Spec) error {
	if err := ValidName(info.Name); err != nil {
		return err
	}
	if r, err := RequestFor(info.Name, spec); err != nil {
		return err
	} else if err := s.b.check(r); err != nil {
		return err
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	h := hex.EncodeToString(id[:])
	info.UUID = h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	spec.ID = h
	info.Backend = BackendName
	info.Status = sandbox.StatusStopped
	info.Network = spec.Network.Mode
	for attempt := 1; ; attempt++ {
		if s.MaxSandboxes > 0 {
			if err := s.underCap(ctx, nil); err != nil {
				return err
			}
		}
		now := time.Now().UTC()
		info.CreatedAt, info.LastActivityAt = now, now
		sec, err := s.insert(ctx, &record{Info: info, Spec: spec})
		if err != nil || s.MaxSandboxes <= 0 {
			return err
		}
		err = s.underCap(ctx, sec)
		if err == nil {
			return nil
		}
		if derr := s.drop(context.WithoutCancel(ctx), sec); derr != nil {
			return fmt.Errorf("%w (and its record could not be withdrawn: %v)", err, derr)
		}
		if attempt == capAttempts {
			return err
		}
		pause := time.Duration(mrand.Int64N(int64(10*time.Millisecond) << attempt))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// capAttempts bounds Create's tries when creators race for the last
// places under max_sandboxes.
const capAttempts = 6

// underCap counts the namespace's records against MaxSandboxes: before
// a create (mine nil), there must be room for one more; after it, the
// count with mine must not exceed the cap.
func (s *Sandboxes) underCap(ctx context.Context, mine *corev1.Secret) error {
	l, err := s.secrets().List(ctx, recordListOptions())
	if err != nil {
		return s.b.apiError("list sandbox records", err)
	}
	n := int64(len(l.Items))
	if mine == nil && n < s.MaxSandboxes || mine != nil && n <= s.MaxSandboxes {
		return nil
	}
	if mine != nil {
		n--
	}
	return fmt.Errorf("already %d sandboxes in namespace %s ([orchestrator] max_sandboxes = %d): remove one first", n, s.b.ns, s.MaxSandboxes)
}

// Get returns the sandbox, its status its pod's.
func (s *Sandboxes) Get(ctx context.Context, name string) (*sandbox.Info, error) {
	r, _, err := s.load(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := s.status(ctx, r.Info); err != nil {
		return nil, err
	}
	return r.Info, nil
}

// List returns every sandbox, oldest first: one list of the records and
// one of the pods. A record that cannot be read is an error that names
// it (kubectl can fix or delete it), not a sandbox left out.
func (s *Sandboxes) List(ctx context.Context) ([]*sandbox.Info, error) {
	recs, err := s.all(ctx)
	if err != nil {
		return nil, err
	}
	pods, err := s.b.List(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Sandbox{}
	for i := range pods {
		p := &pods[i]
		if cur := byName[p.Name]; cur == nil || cur.Removing && !p.Removing {
			byName[p.Name] = p
		}
	}
	out := make([]*sandbox.Info, 0, len(recs))
	for _, r := range recs {
		if r.err != nil {
			return nil, r.err
		}
		statusFrom(r.rec.Info, byName[r.name])
		out = append(out, r.rec.Info)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Update changes name's record: read, fn, written with the
// resourceVersion read; another server's write in between makes it read
// and call fn again.
func (s *Sandboxes) Update(ctx context.Context, name string, fn func(*sandbox.Info) error) (*sandbox.Info, error) {
	r, err := s.modify(ctx, name, func(r *record) error { return fn(r.Info) })
	if err != nil {
		return nil, err
	}
	if err := s.status(ctx, r.Info); err != nil {
		return nil, err
	}
	return r.Info, nil
}

// Remove deletes the sandbox's pod and NetworkPolicy, then its record;
// a running one only with force (sandbox.ErrRunning).
func (s *Sandboxes) Remove(ctx context.Context, name string, force bool) error {
	if err := ValidName(name); err != nil {
		return notFound(name)
	}
	defer s.lock(name)()
	r, sec, err := s.load(ctx, name)
	if err != nil {
		return err
	}
	if err := s.status(ctx, r.Info); err != nil {
		return err
	}
	if r.Info.Status == sandbox.StatusRunning && !force {
		return fmt.Errorf("sandbox %q: %w", name, sandbox.ErrRunning)
	}
	if err := s.b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return s.drop(ctx, sec)
}

// Spec is the spec recorded at create.
func (s *Sandboxes) Spec(ctx context.Context, name string) (*sandbox.Spec, error) {
	r, _, err := s.load(ctx, name)
	if err != nil {
		return nil, err
	}
	return r.Spec, nil
}

// Start makes the sandbox's pod and waits until it runs (sandbox.Supervisor);
// a pod that does not start is removed again and its reason returned.
// The server that starts a sandbox says so in its record first (a start
// claim, written with the resourceVersion read): another server's Start
// of it meanwhile waits for that one to end, then finds the pod running
// (or starts it itself), and never replaces a pod being started.
func (s *Sandboxes) Start(ctx context.Context, name string) (*sandbox.Info, error) {
	if err := ValidName(name); err != nil {
		return nil, notFound(name)
	}
	defer s.lock(name)()
	limit := startTimeout(s.StartTimeout)
	var r *record
	for {
		cur, sec, err := s.load(ctx, name)
		if err != nil {
			return nil, err
		}
		if err := s.status(ctx, cur.Info); err != nil {
			return nil, err
		}
		if cur.Info.Status == sandbox.StatusRunning {
			return cur.Info, nil
		}
		if cur.Info.ExpiresAt != nil && time.Now().After(*cur.Info.ExpiresAt) {
			if err := s.b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
				return nil, err
			}
			if err := s.drop(ctx, sec); err != nil {
				return nil, err
			}
			return nil, &sandbox.ExpiredError{Name: name, At: *cur.Info.ExpiresAt}
		}
		r, err = s.modify(ctx, name, func(r *record) error {
			if c := r.Starting; c != nil && c.By != s.id && time.Now().Before(c.Until) {
				return errClaimed
			}
			r.Starting = &startClaim{By: s.id, Until: time.Now().Add(limit + removeWait + time.Minute)}
			return nil
		})
		if err == nil {
			break
		}
		if !errors.Is(err, errClaimed) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	info, err := s.start(ctx, name, r, limit)
	if err != nil {
		// The claim goes (unless the record went: removed meanwhile).
		_, _ = s.modify(context.WithoutCancel(ctx), name, func(r *record) error {
			if r.Starting != nil && r.Starting.By == s.id {
				r.Starting = nil
			}
			return nil
		})
		return nil, err
	}
	return info, nil
}

// errClaimed: another server is starting the sandbox.
var errClaimed = errors.New("another server is starting the sandbox")

// start makes the pod of r's sandbox, whose start claim this server
// holds, waits until it runs, and records it running.
func (s *Sandboxes) start(ctx context.Context, name string, r *record, limit time.Duration) (*sandbox.Info, error) {
	req, err := RequestFor(name, r.Spec)
	if err != nil {
		return nil, err
	}
	// A pod of this sandbox still ending (stopped a moment ago) holds
	// the name: wait for it to go.
	if err := s.b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if _, err := s.b.Create(ctx, req); err != nil {
		return nil, err
	}
	removePod := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 45*time.Second)
		defer cancel()
		_ = s.b.Remove(rctx, name)
	}
	if _, err := s.b.WaitRunning(ctx, name, limit); err != nil {
		removePod()
		return nil, err
	}
	r, err = s.modify(ctx, name, func(r *record) error {
		r.Info.Status, r.Info.StopReason = sandbox.StatusRunning, ""
		r.Info.LastActivityAt = time.Now().UTC()
		r.Starting = nil
		return nil
	})
	if err != nil {
		// Removed meanwhile (by another server): its pod goes too.
		if errors.Is(err, sandbox.ErrSandboxNotFound) {
			removePod()
		}
		return nil, err
	}
	return r.Info, nil
}

// Stop deletes the sandbox's pod and NetworkPolicy; the record stays.
func (s *Sandboxes) Stop(ctx context.Context, name, reason string) (*sandbox.Info, error) {
	if err := ValidName(name); err != nil {
		return nil, notFound(name)
	}
	defer s.lock(name)()
	if _, _, err := s.load(ctx, name); err != nil {
		return nil, err
	}
	ds := s.podDetached(ctx, name)
	if err := s.b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	r, err := s.modify(ctx, name, func(r *record) error {
		keepDetached(r, ds)
		r.Info.Status, r.Info.StopReason = sandbox.StatusStopped, reason
		r.Info.LastActivityAt = time.Now().UTC()
		// A start under way (here or on another server) loses its pod:
		// its claim goes with it.
		r.Starting = nil
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r.Info, nil
}

// GC removes the sandboxes whose expiry has passed.
func (s *Sandboxes) GC(ctx context.Context, dryRun bool) (sandbox.GCResult, error) {
	var res sandbox.GCResult
	recs, err := s.all(ctx)
	if err != nil {
		return res, err
	}
	for _, r := range recs {
		if r.err != nil || r.rec.Info.ExpiresAt == nil || time.Now().Before(*r.rec.Info.ExpiresAt) {
			continue
		}
		if !dryRun {
			if err := s.Remove(ctx, r.name, true); err != nil && !errors.Is(err, sandbox.ErrSandboxNotFound) {
				return res, err
			}
		}
		res.Sandboxes = append(res.Sandboxes, r.name)
		res.Removed = append(res.Removed, "sandbox "+r.name+" (expired)")
	}
	return res, nil
}

// Connect opens a connection to a running sandbox (sandbox.ErrNotRunning
// when its pod does not run). The record and the pod are read at once,
// and the connection's first commands go to the pod seen here.
func (s *Sandboxes) Connect(ctx context.Context, name string) (sandbox.Conn, error) {
	var (
		r    *record
		rerr error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		r, _, rerr = s.load(ctx, name)
	}()
	seen := time.Now()
	sb, perr := s.b.Get(ctx, name)
	<-done
	if rerr != nil {
		return nil, rerr
	}
	if perr != nil && !errors.Is(perr, ErrNotFound) {
		return nil, perr
	}
	if perr != nil {
		sb = nil
	}
	info := r.Info
	statusFrom(info, sb)
	if info.Status != sandbox.StatusRunning {
		return nil, fmt.Errorf("sandbox %q: %w", name, sandbox.ErrNotRunning)
	}
	// The last activity is a write to the record (the API server): at
	// most one each activityEvery, not one per command.
	if time.Since(info.LastActivityAt) >= activityEvery {
		_, _ = s.modify(ctx, name, func(r *record) error { r.Info.LastActivityAt = time.Now().UTC(); return nil })
	}
	return &conn{b: s.b, name: name, s: s, pod: sb, seen: seen}, nil
}

// activityEvery is how stale a sandbox's recorded last activity may be
// before a connection writes it again.
const activityEvery = 10 * time.Second

// DiskUsage is 0: a pod's writable layer is on its node, out of sight.
func (s *Sandboxes) DiskUsage(context.Context, string) (int64, error) { return 0, nil }

// Host reports no totals: the machines are the cluster's nodes.
func (s *Sandboxes) Host(context.Context) (sandbox.HostUsage, error) {
	return sandbox.HostUsage{}, nil
}
