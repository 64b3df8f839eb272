package nomad

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Options configure the backend ([orchestrator] in configuration).
type Options struct {
	// Address of the Nomad HTTP API; "" means $NOMAD_ADDR, then
	// http://127.0.0.1:4646.
	Address string
	// Namespace, Region and Token; "" means Nomad's defaults
	// ($NOMAD_NAMESPACE, $NOMAD_REGION, $NOMAD_TOKEN, then "default").
	Namespace, Region, Token string
	// Datacenters the jobs may run in; nil means all ("*").
	Datacenters []string
	// Driver is DriverAgentkernel ("" too) or DriverExec.
	Driver string
	// NodeAgentkernel is agentkernel's path on the nodes (default
	// /usr/local/bin/agentkernel-full), NodeDataDir its --data-dir there.
	NodeAgentkernel, NodeDataDir string
	// ExecCommand is what an exec-driver task runs to idle (default
	// /bin/sleep 2147483647).
	ExecCommand []string
	// Now is the clock (nil: time.Now); tests move it for TTLs.
	Now func() time.Time
}

// Backend creates, lists and removes sandboxes as Nomad jobs.
type Backend struct {
	opts   Options
	client *api.Client
}

// ErrExists is returned by Create for a name already in use.
var ErrExists = errors.New("sandbox already exists")

// ErrNotFound is returned for a name with no sandbox.
var ErrNotFound = errors.New("no such sandbox")

// New makes a client for the agent Options name. It sends no request.
func New(o Options) (*Backend, error) {
	cfg := api.DefaultConfig()
	if o.Address != "" {
		cfg.Address = o.Address
	}
	if o.Namespace != "" {
		cfg.Namespace = o.Namespace
	}
	if o.Region != "" {
		cfg.Region = o.Region
	}
	if o.Token != "" {
		cfg.SecretID = o.Token
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if err := validNamespace(cfg.Namespace); err != nil {
		return nil, err
	}
	o.Namespace, o.Region = cfg.Namespace, cfg.Region
	switch o.Driver {
	case "":
		o.Driver = DriverAgentkernel
	case DriverAgentkernel, DriverExec:
	case "raw_exec":
		return nil, fmt.Errorf("driver raw_exec isolates nothing: use agentkernel (raw_exec running the node's agentkernel) or exec")
	default:
		return nil, fmt.Errorf("driver %q: use agentkernel or exec", o.Driver)
	}
	if o.NodeAgentkernel == "" {
		o.NodeAgentkernel = "/usr/local/bin/agentkernel-full"
	}
	if !strings.HasPrefix(o.NodeAgentkernel, "/") {
		return nil, fmt.Errorf("agentkernel_path %q must be absolute", o.NodeAgentkernel)
	}
	if len(o.ExecCommand) == 0 {
		o.ExecCommand = []string{"/bin/sleep", "2147483647"}
	}
	if len(o.Datacenters) == 0 {
		o.Datacenters = []string{"*"}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w (check [orchestrator] nomad_addr)", err)
	}
	return &Backend{opts: o, client: c}, nil
}

func validNamespace(ns string) error {
	if len(ns) > 128 {
		return fmt.Errorf("namespace %.20q… is too long", ns)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("namespace %q: letters, digits, '-' and '_' only", ns)
		}
	}
	return nil
}

// Client is the Nomad API client (for tests and the benchmark).
func (b *Backend) Client() *api.Client { return b.client }

func (b *Backend) jobOptions() jobOptions {
	return jobOptions{Namespace: b.opts.Namespace, Region: b.opts.Region, Datacenters: b.opts.Datacenters,
		Driver: b.opts.Driver, NodeAgentkernel: b.opts.NodeAgentkernel, NodeDataDir: b.opts.NodeDataDir,
		ExecCommand: b.opts.ExecCommand}
}

func (b *Backend) q(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: b.opts.Namespace, Region: b.opts.Region}).WithContext(ctx)
}

func (b *Backend) w(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: b.opts.Namespace, Region: b.opts.Region}).WithContext(ctx)
}

// Sandbox is one sandbox as List shows it.
type Sandbox struct {
	Name  string
	JobID string // agentkernel-NAME, the job that holds the name
	// TaskJobID is the job whose task runs the sandbox: JobID, or for a
	// pooled sandbox the pool job it took (agentkernel.pool-HEX), whose
	// allocation `nomad alloc logs` and `nomad alloc exec` reach.
	TaskJobID string
	// NodeName is the sandbox's name for the node's agentkernel: Name,
	// or for a pooled sandbox its pool job's pool-HEX (a running native
	// sandbox cannot be renamed). The node's `agentkernel sandbox list`,
	// its audit log (`agentkernel audit`) and its data directory name it
	// so.
	NodeName  string
	Status    string // the job's: pending, running, dead
	Profile   string
	Network   string
	Driver    string
	Created   time.Time
	ExpiresAt time.Time // zero: no TTL
	Labels    map[string]string
	Owner     string // OwnerMeta
}

// Create registers r's job. The job ID claims the name: registration
// with EnforceIndex 0 fails when a job of that ID exists, so a second
// Create of the same name fails with ErrExists. It does not wait for the
// task to run (Wait does).
func (b *Backend) Create(ctx context.Context, r *Request) (*Sandbox, error) {
	if err := r.Check(b.opts.Driver); err != nil {
		return nil, err
	}
	if b.opts.Driver == DriverExec && r.Image != "" {
		return nil, fmt.Errorf("image: the exec driver runs the node's own file system; use the agentkernel driver for images")
	}
	job := buildJob(b.jobOptions(), r, b.opts.Now())
	_, _, err := b.client.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: 0}, b.w(ctx))
	if err != nil {
		if strings.Contains(err.Error(), "Enforcing job modify index") {
			return nil, fmt.Errorf("sandbox %q: %w (remove it first)", r.Name, ErrExists)
		}
		return nil, b.apiError("register job", err)
	}
	s := sandboxOf(job.Meta, JobID(r.Name), "pending", 0)
	return &s, nil
}

// Wait blocks until the sandbox's task runs, and returns its allocation
// ID. It fails when the task ended or could not be placed.
func (b *Backend) Wait(ctx context.Context, name string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	id, _, _, err := b.target(ctx, name)
	if err != nil {
		return "", err
	}
	var index uint64
	for {
		q := b.q(ctx)
		q.WaitIndex, q.WaitTime = index, 5*time.Second
		allocs, meta, err := b.client.Jobs().Allocations(id, false, q)
		if err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("sandbox %q: not running: %w", name, ctx.Err())
			}
			return "", b.apiError("list allocations", err)
		}
		for _, a := range allocs {
			ts := a.TaskStates[TaskName]
			switch {
			case a.ClientStatus == api.AllocClientStatusRunning && ts != nil && ts.State == "running":
				return a.ID, nil
			case a.ClientStatus == api.AllocClientStatusFailed || a.ClientStatus == api.AllocClientStatusComplete || a.ClientStatus == api.AllocClientStatusLost:
				return "", fmt.Errorf("sandbox %q: its task ended (%s)%s", name, a.ClientStatus, lastEvent(ts))
			}
		}
		if meta.LastIndex > index {
			index = meta.LastIndex
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("sandbox %q: not running: %w", name, ctx.Err())
		}
	}
}

// Ready waits until the sandbox's task runs and a command runs in it,
// at most timeout, and returns its allocation (what exec needs of it).
func (b *Backend) Ready(ctx context.Context, name string, timeout time.Duration) (*api.Allocation, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := b.Wait(ctx, name); err != nil {
		return nil, err
	}
	for {
		code, err := b.Exec(ctx, name, []string{"true"}, nil, nil, nil)
		if err == nil && code == 0 {
			a, _, err := b.runningAlloc(ctx, name)
			return a, err
		}
		if ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("exit %d", code)
			}
			return nil, fmt.Errorf("sandbox %q: its task runs but the sandbox does not answer (%v): look at `nomad alloc logs` of job %s", name, err, JobID(name))
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func lastEvent(ts *api.TaskState) string {
	if ts == nil || len(ts.Events) == 0 {
		return ""
	}
	e := ts.Events[len(ts.Events)-1]
	return ": " + e.DisplayMessage
}

func sandboxOf(meta map[string]string, id, status string, submit int64) Sandbox {
	s := Sandbox{
		Name: meta[SandboxMeta], JobID: id, TaskJobID: id, NodeName: meta[SandboxMeta], Status: status,
		Profile: meta[ProfileMeta], Network: meta[NetworkMeta], Driver: meta[DriverMeta],
		Labels: labelsOf(meta), Owner: meta[OwnerMeta],
	}
	if pj := meta[PooledJobMeta]; pj != "" {
		// A pooled sandbox's; meta that names no pool job of ours
		// (target refuses it) is not shown.
		s.TaskJobID, s.NodeName = "", ""
		if poolHex(pj) != "" && ValidName(meta[NodeNameMeta]) == nil {
			s.TaskJobID, s.NodeName = pj, meta[NodeNameMeta]
		}
	}
	if submit > 0 {
		s.Created = time.Unix(0, submit)
	}
	if t, ok := expiresAt(meta); ok {
		s.ExpiresAt = t
	}
	return s
}

// List returns the namespace's sandboxes (jobs with our meta), by name.
// Purged jobs are gone; a dead job still listed is shown as dead.
func (b *Backend) List(ctx context.Context) ([]Sandbox, error) {
	q := b.q(ctx)
	q.Prefix = jobPrefix
	jobs, _, err := b.client.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, q)
	if err != nil {
		return nil, b.apiError("list jobs", err)
	}
	out := make([]Sandbox, 0, len(jobs))
	var pooled map[string]string // pool job ID: status
	for _, j := range jobs {
		if j.Meta[ManagedMeta] != ManagedValue || j.ID != JobID(j.Meta[SandboxMeta]) {
			continue
		}
		st := j.Status
		if pj := j.Meta[PooledJobMeta]; pj != "" {
			// A pooled sandbox: the status is its pool job's.
			if pooled == nil {
				pooled = map[string]string{}
				pjs, err := b.poolJobs(ctx)
				if err != nil {
					return nil, err
				}
				for _, p := range pjs {
					pooled[p.ID] = p.Status
				}
			}
			st = pooled[pj]
			if st == "" {
				st = "dead"
			}
		}
		out = append(out, sandboxOf(j.Meta, j.ID, st, j.SubmitTime))
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, nil
}

// Get returns the named sandbox.
func (b *Backend) Get(ctx context.Context, name string) (*Sandbox, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	id, _, j, err := b.target(ctx, name)
	if err != nil {
		return nil, err
	}
	st := ""
	if j.Status != nil {
		st = *j.Status
	}
	if id != JobID(name) {
		// A pooled sandbox: the status is its pool job's.
		st = "dead"
		pj, _, err := b.client.Jobs().Info(id, b.q(ctx))
		if err != nil && !isNotFound(err) {
			return nil, b.apiError("read job", err)
		}
		if err == nil && pj.Status != nil {
			st = *pj.Status
		}
	}
	var submit int64
	if j.SubmitTime != nil {
		submit = *j.SubmitTime
	}
	s := sandboxOf(j.Meta, JobID(name), st, submit)
	return &s, nil
}

// Remove deregisters and purges the named sandbox's job: Nomad stops its
// task (which, with the agentkernel driver, removes the native sandbox
// on the node). A job without our meta is never touched.
func (b *Backend) Remove(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	id, _, _, err := b.target(ctx, name)
	if err != nil {
		return err
	}
	if id != JobID(name) {
		// A pooled sandbox: its pool job first (its task ends the
		// node's sandbox), then its name, then the claim.
		if _, _, err := b.client.Jobs().Deregister(id, true, b.w(ctx)); err != nil && !isNotFound(err) {
			return b.apiError("deregister job", err)
		}
	}
	if _, _, err := b.client.Jobs().Deregister(JobID(name), true, b.w(ctx)); err != nil {
		if isNotFound(err) {
			return fmt.Errorf("sandbox %q: %w", name, ErrNotFound)
		}
		return b.apiError("deregister job", err)
	}
	if id != JobID(name) {
		if _, err := b.client.Variables().Delete(claimVarPrefix+poolHex(id), b.w(ctx)); err != nil && !isNotFound(err) {
			return b.apiError("delete pool claim", err)
		}
	}
	return nil
}

// Exec runs argv in the sandbox through Nomad's allocation exec API
// (the agent's websocket to the client node), with stdin, and returns
// its exit code. With the agentkernel driver the command is wrapped in
// `agentkernel exec NAME --`, so it runs inside the native sandbox, not
// in raw_exec's unisolated task.
func (b *Backend) Exec(ctx context.Context, name string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if err := ValidName(name); err != nil {
		return 0, err
	}
	if len(argv) == 0 {
		return 0, fmt.Errorf("exec: a command is required")
	}
	alloc, node, err := b.runningAlloc(ctx, name)
	if err != nil {
		return 0, err
	}
	return b.execIn(ctx, alloc, name, b.execCommand(node, argv), false, stdin, stdout, stderr)
}

// execCommand is what runs argv in the sandbox named node on the node:
// with the agentkernel driver, the node's `agentkernel exec`.
func (b *Backend) execCommand(node string, argv []string) []string {
	if b.opts.Driver != DriverAgentkernel {
		return argv
	}
	return b.nodeCommand(append([]string{"exec", "-i", node, "--"}, argv...)...)
}

// nodeCommand is the node's agentkernel with args (and its --data-dir).
func (b *Backend) nodeCommand(args ...string) []string {
	cmd := []string{b.opts.NodeAgentkernel}
	if b.opts.NodeDataDir != "" {
		cmd = append(cmd, "--data-dir", b.opts.NodeDataDir)
	}
	return append(cmd, args...)
}

// execIn runs cmd in alloc's task through the exec API.
func (b *Backend) execIn(ctx context.Context, alloc *api.Allocation, name string, cmd []string, tty bool, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// The API's exec does not always return when ctx ends (its stream
	// may wait for the node): once ctx has ended, it gets a few seconds,
	// then the call returns without it, its writers cut off first.
	out, errw := &gate{w: stdout}, &gate{w: stderr}
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := b.client.Allocations().Exec(ctx, alloc, TaskName, tty, cmd, stdin, out, errw, nil, b.q(ctx))
		done <- result{code, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done:
		case <-time.After(5 * time.Second):
			out.close()
			errw.close()
			r = result{-1, ctx.Err()}
		}
	}
	if r.err != nil {
		return r.code, fmt.Errorf("exec in sandbox %q: %w", name, r.err)
	}
	return r.code, nil
}

// gate is a writer that drops what is written once closed.
type gate struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// runningAlloc is the sandbox's running allocation (what the exec API
// needs of it: its ID, node and namespace) and its sandbox's name on the
// node. A sandbox of its own job costs one request; a pooled one (its
// name job has no allocation) three.
func (b *Backend) runningAlloc(ctx context.Context, name string) (*api.Allocation, string, error) {
	allocs, _, err := b.client.Jobs().Allocations(JobID(name), false, b.q(ctx))
	if err != nil {
		if isNotFound(err) {
			return nil, "", fmt.Errorf("sandbox %q: %w", name, ErrNotFound)
		}
		return nil, "", b.apiError("list allocations", err)
	}
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusRunning {
			return &api.Allocation{ID: a.ID, NodeID: a.NodeID, Namespace: a.Namespace}, name, nil
		}
	}
	id := JobID(name)
	if len(allocs) == 0 {
		tid, node, _, err := b.target(ctx, name)
		if err != nil {
			return nil, "", err
		}
		if tid != id {
			id = tid
			a, err := b.runningAllocOf(ctx, tid)
			if err != nil {
				return nil, "", err
			}
			if a != nil {
				return a, node, nil
			}
		}
	}
	return nil, "", fmt.Errorf("sandbox %q is not running (no running allocation): wait for it, or look at `nomad job status %s`", name, id)
}

// WriteFile writes data to path inside the sandbox (through Exec: cat
// reading stdin, the path an argument, never shell code).
func (b *Backend) WriteFile(ctx context.Context, name, path string, data []byte) error {
	if err := checkPath(path); err != nil {
		return err
	}
	var stderr bytes.Buffer
	code, err := b.Exec(ctx, name, []string{"/bin/sh", "-c", `cat > "$1"`, "sh", path}, bytes.NewReader(data), nil, &stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("write %s in sandbox %q: exit %d: %s", path, name, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// ReadFile reads path inside the sandbox, at most limit bytes.
func (b *Backend) ReadFile(ctx context.Context, name, path string, limit int64) ([]byte, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	var out, stderr bytes.Buffer
	lw := &limitWriter{w: &out, n: limit}
	code, err := b.Exec(ctx, name, []string{"/bin/cat", "--", path}, nil, lw, &stderr)
	if err != nil {
		return nil, err
	}
	if lw.over {
		return nil, fmt.Errorf("read %s in sandbox %q: larger than %d bytes", path, name, limit)
	}
	if code != 0 {
		return nil, fmt.Errorf("read %s in sandbox %q: exit %d: %s", path, name, code, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || len(p) > 4096 {
		return fmt.Errorf("path %q: an absolute path inside the sandbox is required", p)
	}
	return nil
}

type limitWriter struct {
	w    io.Writer
	n    int64
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		l.over = true
		p = p[:l.n]
	}
	l.n -= int64(len(p))
	_, err := l.w.Write(p)
	return len(p), err
}

// Reap removes the sandboxes whose TTL has passed, and returns their
// names.
func (b *Backend) Reap(ctx context.Context) ([]string, error) {
	all, err := b.List(ctx)
	if err != nil {
		return nil, err
	}
	now := b.opts.Now()
	var gone []string
	for _, s := range all {
		if s.ExpiresAt.IsZero() || now.Before(s.ExpiresAt) {
			continue
		}
		if err := b.Remove(ctx, s.Name); err != nil && !errors.Is(err, ErrNotFound) {
			return gone, err
		}
		gone = append(gone, s.Name)
	}
	return gone, nil
}

func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.HasStatusCode() {
		// A job purged by someone else between the server's look and its
		// write (a pool's reaper, another server) comes back as a 500
		// whose body says so.
		return ue.StatusCode() == 404 || ue.StatusCode() == 500 && strings.Contains(ue.Body(), "job not found")
	}
	return strings.Contains(err.Error(), "404")
}

// apiError words an API failure for users: one line, with what to do.
func (b *Backend) apiError(what string, err error) error {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.HasStatusCode() {
		switch ue.StatusCode() {
		case 401, 403:
			return fmt.Errorf("%s: Nomad refused our token (%d): set [orchestrator] token or $NOMAD_TOKEN to one whose policy allows submit-job, read-job and alloc-exec in namespace %s: %w", what, ue.StatusCode(), b.opts.Namespace, err)
		}
	}
	if strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("%s: no Nomad agent at %s: start one or set [orchestrator] nomad_addr: %w", what, b.client.Address(), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
