package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// SandboxConn adapts a Client to sandbox.Conn: plain readers and writers become
// pipes, agent errors become sandbox errors.
type SandboxConn struct {
	C *Client
	// Dir is the sandbox's directory, for what the host sees of it
	// (Usage); empty when unknown.
	Dir string
	// Meter reads the sandbox's figures as the host sees them (its
	// cgroup) for Usage; nil: only the agent's.
	Meter sandbox.Meter
}

var _ sandbox.Conn = SandboxConn{}

// Close closes the connection.
func (c SandboxConn) Close() error { return c.C.Close() }

// Exec runs req with stdio; an *os.File is handed to the command as is,
// anything else through a pipe.
func (c SandboxConn) Exec(ctx context.Context, req sandbox.ExecRequest, stdio sandbox.Stdio, sigs <-chan os.Signal) (sandbox.Result, error) {
	if c.Dir != "" {
		// The last exec's time, for TTLs and `list` (no database write).
		now := time.Now()
		_ = os.Chtimes(filepath.Join(c.Dir, "activity"), now, now)
	}
	var closers []io.Closer
	var waits []func()
	defer func() {
		for _, f := range closers {
			f.Close()
		}
	}()
	var stdin *os.File
	switch in := stdio.Stdin.(type) {
	case *os.File:
		stdin = in
	case nil:
		n, err := os.Open(os.DevNull)
		if err != nil {
			return sandbox.Result{}, err
		}
		closers = append(closers, n)
		stdin = n
	default:
		r, w, err := os.Pipe()
		if err != nil {
			return sandbox.Result{}, err
		}
		closers = append(closers, r)
		go func() { _, _ = io.Copy(w, in); w.Close() }()
		stdin = r
	}
	out := func(w io.Writer) (*os.File, error) {
		switch w := w.(type) {
		case *os.File:
			return w, nil
		case nil:
			w2, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err == nil {
				closers = append(closers, w2)
			}
			return w2, err
		}
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		done := make(chan struct{})
		go func() { _, _ = io.Copy(w, r); r.Close(); close(done) }()
		waits = append(waits, func() { pw.Close(); <-done })
		return pw, nil
	}
	stdout, err := out(stdio.Stdout)
	if err != nil {
		return sandbox.Result{}, err
	}
	stderr := stdout
	if stdio.Stderr != stdio.Stdout {
		if stderr, err = out(stdio.Stderr); err != nil {
			return sandbox.Result{}, err
		}
	}
	end, err := c.C.ExecEnd(ctx, ExecRequest{Args: req.Args, Env: req.Env, Workdir: req.Workdir, User: req.User, TTY: req.TTY}, stdin, stdout, stderr, sigs)
	for _, w := range waits {
		w()
	}
	if errors.Is(err, ErrMessageTooLarge) {
		return sandbox.Result{}, fmt.Errorf("exec %s: %w: the arguments and environment are over the %d KiB one exec request carries: %w",
			req.Args[0], unix.E2BIG, MaxMessage>>10, sandbox.ErrCannotInvoke)
	}
	if err != nil {
		return sandbox.Result{}, err
	}
	ws := syscall.WaitStatus(end.Status)
	res := sandbox.Result{ExitCode: ws.ExitStatus(), OOMKills: end.OOMKills, MemoryMB: end.MemoryMB}
	if ws.Signaled() {
		res.Signal = int(ws.Signal())
		res.ExitCode = 128 + res.Signal
	}
	return res, nil
}

// pathErr turns the agent's refusal or errno into a *sandbox.PathError.
func pathErr(p string, err error) error {
	var re *RequestError
	if !errors.As(err, &re) {
		return err
	}
	pe := &sandbox.PathError{Path: p, Err: err, Refused: re.Refused(), NotExist: re.Errno() == unix.ENOENT}
	if pe.NotExist {
		pe.Err = fs.ErrNotExist
	}
	return pe
}

// ReadFile copies the file at p to w.
func (c SandboxConn) ReadFile(ctx context.Context, p string, w io.Writer) (int64, error) {
	n, err := c.C.ReadFile(ctx, p, w)
	return n, pathErr(p, err)
}

// WriteFile creates or replaces p from r.
func (c SandboxConn) WriteFile(ctx context.Context, p string, r io.Reader, mode os.FileMode) (int64, error) {
	n, err := c.C.WriteFile(ctx, p, r, uint32(mode.Perm()))
	return n, pathErr(p, err)
}

// Delete removes p.
func (c SandboxConn) Delete(ctx context.Context, p string, recursive bool) error {
	return pathErr(p, c.C.Delete(ctx, p, recursive))
}

func fileInfo(e Entry) sandbox.FileInfo {
	return sandbox.FileInfo{Name: e.Name, Size: e.Size, Mode: os.FileMode(e.Mode), ModTime: time.Unix(e.ModTime, 0), Link: e.Link}
}

// List lists the directory p.
func (c SandboxConn) List(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
	ents, err := c.C.List(ctx, p)
	if err != nil {
		return nil, pathErr(p, err)
	}
	out := make([]sandbox.FileInfo, len(ents))
	for i, e := range ents {
		out[i] = fileInfo(e)
	}
	return out, nil
}

// Stat describes p.
func (c SandboxConn) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	e, err := c.C.Stat(ctx, p)
	if err != nil {
		return sandbox.FileInfo{}, pathErr(p, err)
	}
	return fileInfo(e), nil
}

// TarOut writes a tar stream of p to w.
func (c SandboxConn) TarOut(ctx context.Context, p string, w io.Writer) error {
	return pathErr(p, c.C.TarOut(ctx, p, w))
}

// TarIn extracts r into the directory p.
func (c SandboxConn) TarIn(ctx context.Context, p string, r io.Reader) error {
	return pathErr(p, c.C.TarIn(ctx, p, r))
}

// Usage reports the sandbox's resource use: uptime, the agent's
// resident set and (without a cgroup) the process count from the
// sandbox, memory, CPU and processes as the host sees them (Meter: its
// cgroup).
func (c SandboxConn) Usage(ctx context.Context) (sandbox.Usage, error) {
	st, err := c.C.Stats(ctx)
	if err != nil {
		return sandbox.Usage{}, err
	}
	u := sandbox.Usage{Status: sandbox.StatusRunning, CPUSeconds: st.CPUSeconds, MemoryBytes: st.MemoryBytes, Pids: st.Pids,
		UpperBytes: st.UpperBytes, UptimeSeconds: st.UptimeSeconds, SupervisorRSS: st.SupervisorRSS, InitRSS: st.InitRSS}
	if c.Dir == "" {
		return u, nil
	}
	var spec sandbox.Spec
	if b, err := os.ReadFile(filepath.Join(c.Dir, "spec.json")); c.Meter != nil && err == nil && json.Unmarshal(b, &spec) == nil && spec.ID != "" {
		if h, ok := c.Meter.Measure(spec.ID); ok {
			u.MemoryBytes, u.CPUSeconds = h.MemoryBytes, h.CPUSeconds
			if h.Pids > 0 {
				u.Pids = h.Pids
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(c.Dir, "supervisor.pid")); err == nil {
		var pid int
		if _, err := fmt.Sscanf(string(b), "%d", &pid); err == nil && pid > 0 {
			u.SupervisorRSS = ProcRSS(pid)
		}
	}
	return u, nil
}

// ProcRSS is a process's resident set in bytes (0 if unknown).
func ProcRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * int64(os.Getpagesize())
}

var _ sandbox.DetachedConn = SandboxConn{}

// ExecDetached starts req as a detached command (sandbox.DetachedConn).
func (c SandboxConn) ExecDetached(ctx context.Context, req sandbox.ExecRequest) (sandbox.DetachedCommand, error) {
	if c.Dir != "" {
		now := time.Now()
		_ = os.Chtimes(filepath.Join(c.Dir, "activity"), now, now)
	}
	er := ExecRequest{Args: req.Args, Env: req.Env, Workdir: req.Workdir, User: req.User, TimeoutMS: req.Timeout.Milliseconds()}
	if req.Timeout > 0 && er.TimeoutMS == 0 {
		er.TimeoutMS = 1
	}
	d, err := c.C.ExecDetached(ctx, er)
	if errors.Is(err, ErrMessageTooLarge) {
		return d, fmt.Errorf("exec %s: %w: the arguments and environment are over the %d KiB one exec request carries: %w",
			req.Args[0], unix.E2BIG, MaxMessage>>10, sandbox.ErrCannotInvoke)
	}
	return d, err
}

// Detached lists the detached commands (id "") or describes one.
func (c SandboxConn) Detached(ctx context.Context, id string) ([]sandbox.DetachedCommand, error) {
	return c.C.Detached(ctx, id)
}

// DetachedLogs copies a detached command's stream from offset to w.
func (c SandboxConn) DetachedLogs(ctx context.Context, id, stream string, offset int64, w io.Writer) (int64, error) {
	return c.C.DetachedLogs(ctx, id, stream, offset, w)
}

// KillDetached kills a detached command and returns it once ended.
func (c SandboxConn) KillDetached(ctx context.Context, id string) (sandbox.DetachedCommand, error) {
	return c.C.KillDetached(ctx, id)
}
