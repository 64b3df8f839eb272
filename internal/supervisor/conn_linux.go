package supervisor

import (
	"bufio"
	"bytes"
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
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Conn adapts a Client to sandbox.Conn: plain readers and writers become
// pipes, agent errors become sandbox errors.
type Conn struct {
	C *Client
	// Dir is the sandbox's directory, for what the host sees of it
	// (Usage); empty when unknown.
	Dir string
}

var _ sandbox.Conn = Conn{}

// Close closes the connection.
func (c Conn) Close() error { return c.C.Close() }

// Exec runs req with stdio; an *os.File is handed to the command as is,
// anything else through a pipe.
func (c Conn) Exec(ctx context.Context, req sandbox.ExecRequest, stdio sandbox.Stdio, sigs <-chan os.Signal) (sandbox.Result, error) {
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
	ws, err := c.C.Exec(ctx, agent.ExecRequest{Args: req.Args, Env: req.Env, Workdir: req.Workdir, User: req.User, TTY: req.TTY}, stdin, stdout, stderr, sigs)
	for _, w := range waits {
		w()
	}
	if errors.Is(err, agent.ErrMessageTooLarge) {
		return sandbox.Result{}, fmt.Errorf("exec %s: %w: the arguments and environment are over the %d KiB one exec request carries: %w",
			req.Args[0], unix.E2BIG, agent.MaxMessage>>10, sandbox.ErrCannotInvoke)
	}
	if err != nil {
		return sandbox.Result{}, err
	}
	res := sandbox.Result{ExitCode: ws.ExitStatus()}
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
func (c Conn) ReadFile(ctx context.Context, p string, w io.Writer) (int64, error) {
	n, err := c.C.ReadFile(ctx, p, w)
	return n, pathErr(p, err)
}

// WriteFile creates or replaces p from r.
func (c Conn) WriteFile(ctx context.Context, p string, r io.Reader, mode os.FileMode) (int64, error) {
	n, err := c.C.WriteFile(ctx, p, r, uint32(mode.Perm()))
	return n, pathErr(p, err)
}

// Delete removes p.
func (c Conn) Delete(ctx context.Context, p string, recursive bool) error {
	return pathErr(p, c.C.Delete(ctx, p, recursive))
}

func fileInfo(e agent.Entry) sandbox.FileInfo {
	return sandbox.FileInfo{Name: e.Name, Size: e.Size, Mode: os.FileMode(e.Mode), ModTime: time.Unix(e.ModTime, 0), Link: e.Link}
}

// List lists the directory p.
func (c Conn) List(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
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
func (c Conn) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	e, err := c.C.Stat(ctx, p)
	if err != nil {
		return sandbox.FileInfo{}, pathErr(p, err)
	}
	return fileInfo(e), nil
}

// TarOut writes a tar stream of p to w.
func (c Conn) TarOut(ctx context.Context, p string, w io.Writer) error {
	return pathErr(p, c.C.TarOut(ctx, p, w))
}

// TarIn extracts r into the directory p.
func (c Conn) TarIn(ctx context.Context, p string, r io.Reader) error {
	return pathErr(p, c.C.TarIn(ctx, p, r))
}

// Usage reports the sandbox's resource use: uptime, the agent's
// resident set and (without a cgroup) the process count from the
// sandbox, memory, CPU and processes from its cgroup on the host.
func (c Conn) Usage(ctx context.Context) (sandbox.Usage, error) {
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
	if b, err := os.ReadFile(filepath.Join(c.Dir, "spec.json")); err == nil && json.Unmarshal(b, &spec) == nil && spec.ID != "" {
		if mem, cpu, pids, ok := native.CgroupUsage(spec.ID); ok {
			u.MemoryBytes, u.CPUSeconds = mem, cpu
			if pids > 0 {
				u.Pids = pids
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(c.Dir, "supervisor.pid")); err == nil {
		var pid int
		if _, err := fmt.Sscanf(string(b), "%d", &pid); err == nil && pid > 0 {
			u.SupervisorRSS = native.ProcRSS(pid)
		}
	}
	return u, nil
}

// Host reports the machine's CPU (sampled over 100 ms), memory and the
// data directory's disk use.
func (m *Manager) Host(ctx context.Context) (sandbox.HostUsage, error) {
	h := sandbox.HostUsage{CPUs: numCPU()}
	busy0, total0 := cpuTicks()
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return h, ctx.Err()
	}
	busy1, total1 := cpuTicks()
	if total1 > total0 {
		h.CPUPercent = 100 * float64(busy1-busy0) / float64(total1-total0)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			h.Load1, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	mem := meminfo()
	h.MemoryTotalBytes = mem["MemTotal"]
	h.MemoryUsedBytes = mem["MemTotal"] - mem["MemAvailable"]
	h.DataDirBytes = diskUsage(m.DataDir)
	var sfs unix.Statfs_t
	if unix.Statfs(m.DataDir, &sfs) == nil {
		h.DiskFreeBytes = int64(sfs.Bavail) * sfs.Bsize
	}
	return h, nil
}

func numCPU() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		return set.Count()
	}
	return 1
}

// cpuTicks are the busy and total jiffies of /proc/stat's cpu line.
func cpuTicks() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// meminfo is /proc/meminfo in bytes.
func meminfo() map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		out[k] = n * 1024
	}
	return out
}

// diskUsage is the space the files under dir take (allocated blocks,
// hard links counted once, other file systems skipped).
func diskUsage(dir string) int64 {
	var n int64
	var root unix.Stat_t
	if unix.Lstat(dir, &root) != nil {
		return 0
	}
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := [2]uint64{st.Dev, st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		n += st.Blocks * 512
		return nil
	})
	return n
}
