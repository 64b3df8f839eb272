package nomad

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A persistent sandbox on Nomad is one job per boot: Boot registers it
// (owned by the sandbox's id) and returns once the node's sandbox
// answers; its supervisor on this host holds the Instance and serves the
// agent protocol over it, each command and file operation an exec
// through Nomad's allocation exec API running the node's agentkernel
// (`exec` for commands, `cp` for files, so that the node's own confined
// file operations do them); stop purges the job, which ends the node's
// sandbox with its task. Nothing of it is kept from one boot to the
// next: a start is a fresh sandbox.

var (
	_ sandbox.Booter    = (*Sandboxes)(nil)
	_ agent.Sandbox     = (*instance)(nil)
	_ agent.RemoteFiles = (*instance)(nil)
)

// maxFileBytes bounds a file written through WriteFile (held in memory:
// a tar header needs its size first).
const maxFileBytes = 64 << 20

// Boot starts the persistent sandbox spec describes as a job and returns
// once its sandbox answers (sandbox.Booter). A job its earlier
// supervisor left (same owner) is replaced; any other job of that name
// is refused.
func (s *Sandboxes) Boot(ctx context.Context, spec *sandbox.Spec, dir string, log *os.File) (sandbox.Instance, error) {
	if err := s.Check(spec); err != nil {
		return nil, err
	}
	if spec.Name == "" || spec.ID == "" {
		return nil, errors.New("backend nomad: the sandbox has no name or id")
	}
	b, _ := s.backend()
	r := s.request(spec, spec.Name)
	// A waiting pool job of the same spec first (one that `serve`
	// prepared), else a job of its own.
	_, err := b.CreateMatching(ctx, r)
	if errors.Is(err, ErrPoolEmpty) {
		_, err = b.Create(ctx, r)
	}
	if errors.Is(err, ErrExists) {
		old, gerr := b.Get(ctx, spec.Name)
		if gerr != nil || old.Owner != spec.ID {
			return nil, fmt.Errorf("%w: job %s belongs to another sandbox of that name (another server's, or `-B nomad sandbox create`)", err, JobID(spec.Name))
		}
		if err := b.stopAndPurge(ctx, spec.Name); err != nil {
			return nil, err
		}
		if _, err := b.Create(ctx, r); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	alloc, err := b.Ready(ctx, spec.Name, s.startTimeout)
	if err != nil {
		purge(b, spec.Name)
		return nil, err
	}
	job, node, _, err := b.target(ctx, spec.Name)
	if err != nil {
		purge(b, spec.Name)
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	i := &instance{b: b, name: spec.Name, job: job, nodeName: node, env: spec.Env, alloc: alloc, start: time.Now(), done: make(chan struct{}), cancel: cancel}
	go i.watch(wctx)
	if log != nil {
		fmt.Fprintf(log, "backend nomad: job %s, allocation %s on node %s\n", job, alloc.ID, alloc.NodeID)
	}
	return i, nil
}

// stopAndPurge stops name's job, waits until none of its allocations
// runs (the node's sandbox of that name is removed by then), and purges
// it: a job registered under the name next finds nothing of it.
func (b *Backend) stopAndPurge(ctx context.Context, name string) error {
	id, _, _, err := b.target(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if id != JobID(name) {
		// A pooled sandbox: Remove stops and purges its pool job (its
		// node sandbox has a name of its own: nothing to wait for).
		if err := b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return b.waitGone(ctx, name)
	}
	if _, _, err := b.client.Jobs().Deregister(JobID(name), false, b.w(ctx)); err != nil && !isNotFound(err) {
		return b.apiError("stop job", err)
	}
	ctx2, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		allocs, _, err := b.client.Jobs().Allocations(JobID(name), true, b.q(ctx2))
		if err != nil && !isNotFound(err) {
			return b.apiError("list allocations", err)
		}
		live := 0
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
				live++
			}
		}
		if live == 0 {
			break
		}
		select {
		case <-ctx2.Done():
			return fmt.Errorf("job %s: its task did not stop: %w", JobID(name), ctx2.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, _, err := b.client.Jobs().Deregister(JobID(name), true, b.w(ctx)); err != nil && !isNotFound(err) {
		return b.apiError("purge job", err)
	}
	return b.waitGone(ctx, name)
}

// waitGone waits until name's job is purged (a purge is asynchronous
// for its allocations, not for the job's ID: Create right after is safe
// once Get says it is gone).
func (b *Backend) waitGone(ctx context.Context, name string) error {
	for i := 0; i < 100; i++ {
		if _, err := b.Get(ctx, name); errors.Is(err, ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("job %s is still there after its purge", JobID(name))
}

// instance is a running persistent sandbox on Nomad, as its supervisor
// holds it.
type instance struct {
	b    *Backend
	name string
	// job is the ID of the job whose task runs the sandbox (a pool
	// job's for a pooled one), node its sandbox's name on the node.
	job, nodeName string
	// env is the sandbox's environment (Spec.Env), under each exec's.
	env    []string
	alloc  *api.Allocation
	start  time.Time
	done   chan struct{}
	cancel context.CancelFunc

	mu       sync.Mutex
	qcancel  context.CancelFunc // the watch's query in flight
	stopping bool
	reason   string
	stopOnce sync.Once
}

// watch waits until the job's allocation is no longer running (or is
// gone), with Nomad's blocking queries on the allocation itself; once
// the instance is told to end (poke), it asks every 100 ms instead (a
// blocking query does not always wake for a stop).
func (i *instance) watch(ctx context.Context) {
	defer close(i.done)
	b := i.b
	var index uint64
	for {
		qctx, qcancel := context.WithCancel(ctx)
		i.mu.Lock()
		stopping := i.stopping
		i.qcancel = qcancel
		i.mu.Unlock()
		q := b.q(qctx)
		if !stopping {
			q.WaitIndex, q.WaitTime = index, 30*time.Second
		}
		a, meta, err := b.client.Allocations().Info(i.alloc.ID, q)
		qcancel()
		if ctx.Err() != nil {
			i.ended("")
			return
		}
		if err == nil && a.ClientStatus != api.AllocClientStatusRunning && a.ClientStatus != api.AllocClientStatusPending {
			i.ended(fmt.Sprintf("its job's task ended (%s)%s", a.ClientStatus, lastEvent(a.TaskStates[TaskName])))
			return
		}
		if err != nil && isNotFound(err) {
			i.ended("its job is gone")
			return
		}
		if err == nil && meta.LastIndex > index {
			index = meta.LastIndex
		}
		if err != nil || stopping {
			// The agent is unreachable for now, or the task is being
			// stopped: ask again shortly.
			select {
			case <-ctx.Done():
				i.ended("")
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

func (i *instance) ended(why string) {
	i.mu.Lock()
	if !i.stopping && i.reason == "" {
		i.reason = why
	}
	i.mu.Unlock()
}

func (i *instance) Done() <-chan struct{} { return i.done }

func (i *instance) ExitReason() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopping {
		return ""
	}
	return i.reason
}

// end stops the job (deregistered, not yet purged: its allocation
// stays readable until the task has ended, which watch waits for);
// stopping says it was asked for.
func (i *instance) end() {
	i.stopOnce.Do(func() {
		i.mu.Lock()
		i.stopping = true
		qcancel := i.qcancel
		i.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _, _ = i.b.client.Jobs().Deregister(i.job, false, i.b.w(ctx))
		if qcancel != nil {
			qcancel()
		}
	})
}

// Kill stops the job (sandbox.Instance); Close purges it.
func (i *instance) Kill() { i.end() }

// Stop stops the job and returns once its task has ended, the node's
// sandbox with it, then purges the job (agent.Sandbox).
func (i *instance) Stop() {
	i.end()
	select {
	case <-i.done:
	case <-time.After(30 * time.Second):
		i.cancel()
		<-i.done
	}
	purge(i.b, i.name)
}

// Close waits until the sandbox has ended and purges its job
// (sandbox.Instance).
func (i *instance) Close() {
	<-i.done
	i.cancel()
	purge(i.b, i.name)
}

// FS is nil: the instance is an agent.RemoteFiles, which the agent
// server uses instead.
func (i *instance) FS() *agent.FS { return nil }

// Stats are the uptime: the node's figures stay on the node.
func (i *instance) Stats() agent.Stats {
	return agent.Stats{UptimeSeconds: time.Since(i.start).Seconds()}
}

// node runs the node's agentkernel with args in the job's task.
func (i *instance) node(ctx context.Context, args []string, tty bool, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return i.b.execIn(ctx, i.alloc, i.name, i.b.nodeCommand(args...), tty, stdin, stdout, stderr)
}

// Exec runs req in the node's sandbox (`agentkernel exec`), its stdio
// the three descriptors (duplicated: the caller closes its own). A
// signal ends the command: the exec API forwards none, and closing its
// stream makes the node's agentkernel kill what it started.
func (i *instance) Exec(req *agent.ExecRequest, stdio [3]int) (agent.Process, error) {
	env := append(append([]string(nil), i.env...), req.Env...)
	x, err := execWithEnv(i.nodeName, req.Args, env, req.Workdir, req.User, req.TTY)
	if err != nil {
		return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()}
	}
	var files [3]*os.File
	for k, fd := range stdio {
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range files[:k] {
				f.Close()
			}
			return nil, err
		}
		files[k] = os.NewFile(uintptr(nfd), "stdio")
	}
	ctx, cancel := context.WithCancel(context.Background())
	if req.TimeoutMS > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), time.Duration(req.TimeoutMS)*time.Millisecond)
	}
	p := &process{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cancel()
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
		code, err := i.b.runNode(ctx, i.alloc, i.name, x, files[0], files[1], files[2])
		switch {
		case err != nil && ctx.Err() != nil:
			p.status = syscall.WaitStatus(syscall.SIGKILL)
		case err != nil:
			fmt.Fprintf(files[2], "agentkernel: %v\n", err)
			p.status = syscall.WaitStatus(125 << 8)
		default:
			p.status = syscall.WaitStatus((code & 0xff) << 8)
		}
	}()
	return p, nil
}

// process is a command running through the exec API.
type process struct {
	cancel context.CancelFunc
	done   chan struct{}
	status syscall.WaitStatus
}

// Pid is 0: the command's pid is the node's.
func (p *process) Pid() int { return 0 }

// Signal ends the command whatever sig is (the exec API forwards none).
func (p *process) Signal(sig syscall.Signal) error {
	if sig != 0 {
		p.cancel()
	}
	return nil
}

func (p *process) SignalGroup(sig syscall.Signal) error { return p.Signal(sig) }

func (p *process) Wait() syscall.WaitStatus {
	<-p.done
	return p.status
}

// nodeError words a failed `cp` of the node's agentkernel as the agent's
// file errors are: ENOENT for a missing file, ErrRefused for a path
// never allowed.
func nodeError(p string, code int, stderr string) error {
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr), "agentkernel: "))
	switch {
	case strings.Contains(msg, "no such file or directory"):
		return fmt.Errorf("%s: %w", p, syscall.ENOENT)
	case strings.Contains(msg, agent.ErrRefused.Error()):
		return fmt.Errorf("%s: %w", p, agent.ErrRefused)
	case strings.Contains(msg, "is a directory"):
		return fmt.Errorf("%s: %w", p, syscall.EISDIR)
	case strings.Contains(msg, "not a directory"):
		return fmt.Errorf("%s: %w", p, syscall.ENOTDIR)
	}
	if msg == "" {
		msg = fmt.Sprintf("exit %d", code)
	}
	return fmt.Errorf("%s: %s", p, msg)
}

// tarOut runs the node's `cp NAME:p -` into w.
func (i *instance) tarOut(ctx context.Context, p string, w io.Writer) error {
	var stderr bytes.Buffer
	code, err := i.node(ctx, []string{"cp", i.nodeName + ":" + p, "-"}, false, nil, w, &limited{w: &stderr, n: 4096})
	if err != nil {
		return err
	}
	if code != 0 {
		return nodeError(p, code, stderr.String())
	}
	return nil
}

// TarOut writes a tar stream of p (agent.RemoteFiles).
func (i *instance) TarOut(p string, w io.Writer) error {
	return i.tarOut(context.Background(), p, w)
}

// TarIn extracts r into dir with the node's `cp - NAME:dir`, whose own
// extraction (confined to the sandbox) does it; a missing dir is made
// first (agent.RemoteFiles).
func (i *instance) TarIn(dir string, r io.Reader) error {
	if err := i.mkdirAll(dir); err != nil {
		return err
	}
	return i.tarIn(dir, r)
}

func (i *instance) tarIn(dir string, r io.Reader) error {
	var stderr bytes.Buffer
	code, err := i.node(context.Background(), []string{"cp", "-", i.nodeName + ":" + dir}, false, r, io.Discard, &limited{w: &stderr, n: 4096})
	if err != nil {
		return err
	}
	if code != 0 {
		return nodeError(dir, code, stderr.String())
	}
	return nil
}

// mkdirAll makes dir and its missing parents: a tar stream of the
// missing directories only, extracted by the node's agentkernel into the
// deepest one that exists (nothing that exists is touched; the image
// needs no mkdir).
func (i *instance) mkdirAll(dir string) error {
	dir = path.Clean(dir)
	var missing []string
	for d := dir; d != "/"; d = path.Dir(d) {
		missing = append([]string{path.Base(d)}, missing...)
		if len(missing) > 128 {
			break
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		name := ""
		for _, m := range missing {
			name += m + "/"
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Now()}); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		if len(missing) == 1 {
			// The first try: dir itself exists?
			if _, err := i.Stat(dir); err == nil {
				return nil
			} else if !errors.Is(err, syscall.ENOENT) {
				return err
			}
		}
		err := i.tarIn(path.Dir(d), &buf)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.ENOENT) {
			return err
		}
	}
	return fmt.Errorf("%s: %w", dir, syscall.ENOENT)
}

// entries reads the tar stream of p, calling fn for each header until
// it returns false; the stream is cut there.
func (i *instance) entries(p string, fn func(h *tar.Header, r io.Reader) (bool, error)) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := i.tarOut(ctx, p, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	tr := tar.NewReader(pr)
	var ferr error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			ferr = err
			break
		}
		more, err := fn(h, tr)
		if err != nil || !more {
			ferr = err
			cancel()
			pr.CloseWithError(io.ErrClosedPipe)
			<-errc
			return ferr
		}
	}
	pr.Close()
	if err := <-errc; err != nil {
		return err
	}
	return ferr
}

func entryOf(name string, h *tar.Header) agent.Entry {
	return agent.Entry{Name: name, Size: h.Size, Mode: uint32(h.FileInfo().Mode()), ModTime: h.ModTime.Unix(), Link: h.Linkname}
}

// ReadFile copies the regular file at p to w (agent.RemoteFiles).
func (i *instance) ReadFile(p string, w io.Writer) (int64, error) {
	var n int64
	seen := false
	err := i.entries(p, func(h *tar.Header, r io.Reader) (bool, error) {
		seen = true
		if h.Typeflag == tar.TypeDir {
			return false, fmt.Errorf("%s: %w", p, syscall.EISDIR)
		}
		if h.Typeflag != tar.TypeReg {
			return false, fmt.Errorf("%s: not a regular file: %w", p, agent.ErrRefused)
		}
		var err error
		n, err = io.Copy(w, r)
		return false, err
	})
	if err == nil && !seen {
		err = fmt.Errorf("%s: %w", p, syscall.ENOENT)
	}
	return n, err
}

// WriteFile creates or replaces p, its parents made (agent.RemoteFiles).
func (i *instance) WriteFile(p string, mode uint32, r io.Reader) (int64, error) {
	dir, base := path.Split(path.Clean(p))
	if base == "" || base == "/" || dir == "" {
		return 0, fmt.Errorf("%s: %w", p, agent.ErrRefused)
	}
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return 0, err
	}
	if len(data) > maxFileBytes {
		return 0, fmt.Errorf("%s: larger than %d MiB, the most a file written on Nomad takes: %w", p, maxFileBytes>>20, syscall.EFBIG)
	}
	if mode&0o7777 == 0 {
		mode = 0o644
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: base, Typeflag: tar.TypeReg, Mode: int64(mode & 0o777), Size: int64(len(data)), ModTime: time.Now()}); err != nil {
		return 0, err
	}
	if _, err := tw.Write(data); err != nil {
		return 0, err
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	if err := i.TarIn(dir, &buf); err != nil {
		return 0, err
	}
	return int64(len(data)), nil
}

// Stat describes p: the first header of its tar stream (agent.RemoteFiles).
func (i *instance) Stat(p string) (agent.Entry, error) {
	var e agent.Entry
	seen := false
	err := i.entries(p, func(h *tar.Header, _ io.Reader) (bool, error) {
		seen = true
		e = entryOf(path.Base(path.Clean(p)), h)
		return false, nil
	})
	if err == nil && !seen {
		err = fmt.Errorf("%s: %w", p, syscall.ENOENT)
	}
	return e, err
}

// List lists the directory p: the entries one level below it in its tar
// stream (agent.RemoteFiles).
func (i *instance) List(p string) ([]agent.Entry, error) {
	var out []agent.Entry
	top := ""
	isDir := false
	err := i.entries(p, func(h *tar.Header, _ io.Reader) (bool, error) {
		name := strings.TrimSuffix(h.Name, "/")
		if top == "" {
			top = name
			isDir = h.Typeflag == tar.TypeDir
			if !isDir {
				return false, fmt.Errorf("%s: %w", p, syscall.ENOTDIR)
			}
			return true, nil
		}
		rest, ok := strings.CutPrefix(name, top+"/")
		if ok && rest != "" && !strings.Contains(rest, "/") {
			out = append(out, entryOf(rest, h))
		}
		return true, nil
	})
	if err == nil && top == "" {
		err = fmt.Errorf("%s: %w", p, syscall.ENOENT)
	}
	return out, err
}

// Delete removes p in the sandbox with its own rm (or rmdir, for a
// directory without recursive): the node's agentkernel has no file
// removal of its own (agent.RemoteFiles).
func (i *instance) Delete(p string, recursive bool) error {
	script := `[ -e "$1" ] || [ -L "$1" ] || { echo "$1: no such file or directory" >&2; exit 1; }; ` +
		`if [ -d "$1" ] && [ ! -L "$1" ]; then if [ "$2" = r ]; then rm -rf -- "$1"; else rmdir -- "$1"; fi; else rm -f -- "$1"; fi`
	flag := "-"
	if recursive {
		flag = "r"
	}
	args, err := execArgs(i.nodeName, []string{"/bin/sh", "-c", script, "sh", p, flag}, nil, "", "", false)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	code, err := i.node(context.Background(), args, false, nil, io.Discard, &limited{w: &stderr, n: 4096})
	if err != nil {
		return err
	}
	if code != 0 {
		return nodeError(p, code, stderr.String())
	}
	return nil
}

// limited keeps the first n bytes written to it.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	k := min(len(p), l.n)
	if k > 0 {
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
