package agent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Detached commands: started by one client, owned by the Server (not by
// the connection that asked), so they run on when that client goes.
// Each has a directory under the server's detached directory:
//
//	ID/meta.json   the sandbox.DetachedCommand, rewritten at start and end
//	ID/stdout      the command's stdout, sandbox.DetachedLogCap at most
//	ID/stderr      its stderr, the same
//
// The command's stdout and stderr are pipes the server copies into the
// files; past the cap the copy writes sandbox.DetachedLogMarker once and
// then reads and drops the rest, so the command never blocks on a full
// pipe. The newest maxDetachedKept ended commands are kept, with their
// output; older ones are forgotten and their directories removed.
// Commands recorded by an earlier server of the same directory (a
// sandbox that was stopped and started again) are listed as failed,
// "sandbox stopped", when they had not ended.

// ExecEnd is how a command ended that no client saw end: a detached one,
// or a foreground one whose client went away (Reason "client gone":
// the server killed it). Server.Audit receives them.
type ExecEnd struct {
	Args     []string
	ExitCode int
	Duration time.Duration
	// Reason: "client gone", "detached: id …", "detached: id … timed out".
	Reason string
}

// detachedSet is a Server's detached commands.
type detachedSet struct {
	dir string

	mu   sync.Mutex
	cmds map[string]*detachedCmd
	// starting counts detaches between their admission and their entry
	// in cmds, so that the limit holds for concurrent requests.
	starting int
}

// admit reserves a place for one more running detached command, or
// reports false when sandbox.MaxDetachedRunning already run or start.
func (d *detachedSet) admit() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.starting
	for _, cmd := range d.cmds {
		select {
		case <-cmd.done:
		default:
			n++
		}
	}
	if n >= sandbox.MaxDetachedRunning {
		return false
	}
	d.starting++
	return true
}

// admitted ends a reservation of admit: cmd (nil when its start failed)
// joins the set.
func (d *detachedSet) admitted(cmd *detachedCmd) {
	d.mu.Lock()
	d.starting--
	if cmd != nil {
		d.cmds[cmd.info.ID] = cmd
	}
	d.mu.Unlock()
}

type detachedCmd struct {
	mu   sync.Mutex
	info sandbox.DetachedCommand
	proc Process
	// out counts what each stream's copy has written (cap and marker
	// included), for the record.
	out  [2]*capWriter
	done chan struct{} // closed once the command has ended
}

// ServeDetached enables detached commands, kept under dir (created).
func (s *Server) ServeDetached(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d := &detachedSet{dir: dir, cmds: map[string]*detachedCmd{}}
	restored := map[string]Restored{}
	if dr, ok := s.sb.(DetachedRestorer); ok {
		for id, r := range dr.RestoredDetached() {
			restored[id] = r
		}
	}
	var resumed []*detachedCmd
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if sandbox.ValidDetachedID(e.Name()) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "meta.json"))
		if err != nil {
			continue
		}
		var info sandbox.DetachedCommand
		if json.Unmarshal(b, &info) != nil || info.ID != e.Name() {
			continue
		}
		if info.Status == sandbox.DetachedRunning {
			if r, ok := restored[info.ID]; ok {
				delete(restored, info.ID)
				if cmd, err := d.resume(info, r); err == nil {
					d.cmds[info.ID] = cmd
					resumed = append(resumed, cmd)
					continue
				}
				killProc(r.Proc)
			}
			now := time.Now().UTC()
			info.Status, info.Reason, info.FinishedAt = sandbox.DetachedFailed, "sandbox stopped", &now
			writeMeta(filepath.Join(dir, info.ID), &info)
		}
		done := make(chan struct{})
		close(done)
		d.cmds[info.ID] = &detachedCmd{info: info, done: done}
	}
	// A restored command without a running record is nobody's.
	for _, r := range restored {
		killProc(r.Proc)
		r.Stdout.Close()
		r.Stderr.Close()
	}
	d.prune()
	s.det = d
	for _, cmd := range resumed {
		s.watchDetached(cmd, filepath.Join(dir, cmd.info.ID), cmd.info.StartedAt, 0)
	}
	return nil
}

// resume makes a detached command that the sandbox's boot restored
// (DetachedRestorer) one of d's again, running: its output copied on
// after what its files hold.
func (d *detachedSet) resume(info sandbox.DetachedCommand, r Restored) (*detachedCmd, error) {
	dir := filepath.Join(d.dir, info.ID)
	cmd := &detachedCmd{proc: r.Proc, done: make(chan struct{}), info: info}
	var files [2]*os.File
	for i, name := range []string{"stdout", "stderr"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0)
		if err == nil {
			var st os.FileInfo
			if st, err = f.Stat(); err == nil && !st.Mode().IsRegular() {
				err = fmt.Errorf("%s: not a regular file", name)
			}
			if err == nil {
				cmd.out[i] = &capWriter{f: f, limit: sandbox.DetachedLogCap, n: st.Size(), clipped: st.Size() >= sandbox.DetachedLogCap}
			}
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			for _, g := range files[:i] {
				g.Close()
			}
			return nil, err
		}
		files[i] = f
	}
	for i, rd := range []*os.File{r.Stdout, r.Stderr} {
		go func(w *capWriter, rd, f *os.File) {
			_, _ = io.Copy(w, rd)
			rd.Close()
			f.Close()
		}(cmd.out[i], rd, files[i])
	}
	return cmd, nil
}

func newDetachedID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

func writeMeta(dir string, info *sandbox.DetachedCommand) {
	b, err := json.Marshal(info)
	if err != nil {
		return
	}
	tmp := filepath.Join(dir, "meta.json.tmp")
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, "meta.json"))
	}
}

// capWriter writes to f up to limit bytes, then the marker once, then
// drops what comes.
type capWriter struct {
	f       *os.File
	limit   int64
	mu      sync.Mutex
	n       int64
	clipped bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.clipped {
		return len(p), nil
	}
	room := w.limit - w.n
	q := p
	if int64(len(q)) > room {
		q = q[:room]
	}
	k, err := w.f.Write(q)
	w.n += int64(k)
	if err != nil {
		// A full disk: stop writing, keep draining.
		w.clipped = true
		return len(p), nil
	}
	if int64(len(p)) > room {
		k, _ := w.f.WriteString(sandbox.DetachedLogMarker)
		w.n += int64(k)
		w.clipped = true
	}
	return len(p), nil
}

func (w *capWriter) size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// snapshot is the command's record as of now.
func (c *detachedCmd) snapshot() sandbox.DetachedCommand {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := c.info
	info.Command = append([]string(nil), c.info.Command...)
	if c.out[0] != nil {
		info.StdoutBytes, info.StderrBytes = c.out[0].size(), c.out[1].size()
	}
	return info
}

// detach starts req as a detached command.
func (c *serverConn) detach(req Request) {
	d := c.s.det
	if d == nil {
		_ = c.conn.Send(Response{ID: req.ID, Error: "detached commands are not available in this sandbox", Kind: KindSetup})
		return
	}
	if req.Exec == nil || len(req.Exec.Args) == 0 || req.Exec.TTY {
		_ = c.conn.Send(Response{ID: req.ID, Error: "a detached command needs a command and no terminal", Kind: KindSetup})
		return
	}
	if !d.admit() {
		_ = c.conn.Send(Response{ID: req.ID, Kind: KindLimit, Error: fmt.Sprintf(
			"this sandbox already runs %d detached commands, the most it may; wait for one to end or kill one (agentkernel exec NAME --kill ID)", sandbox.MaxDetachedRunning)})
		return
	}
	entered := false
	defer func() {
		if !entered {
			d.admitted(nil) // its start failed
		}
	}()
	fail := func(err error) {
		resp := Response{ID: req.ID, Error: err.Error(), Kind: KindSetup}
		var ee *ExecError
		if errors.As(err, &ee) {
			resp.Kind, resp.Errno = ee.Kind, int(ee.Errno)
		}
		_ = c.conn.Send(resp)
	}
	id, err := newDetachedID()
	if err != nil {
		fail(err)
		return
	}
	dir := filepath.Join(d.dir, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		fail(err)
		return
	}
	var files [2]*os.File
	var pipes [2][2]*os.File // read, write
	cleanup := func() {
		for i := range files {
			for _, f := range []*os.File{files[i], pipes[i][0], pipes[i][1]} {
				if f != nil {
					f.Close()
				}
			}
		}
		_ = os.RemoveAll(dir)
	}
	for i, name := range []string{"stdout", "stderr"} {
		if files[i], err = os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
			pipes[i][0], pipes[i][1], err = os.Pipe()
		}
		if err != nil {
			cleanup()
			fail(err)
			return
		}
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		cleanup()
		fail(err)
		return
	}
	start := time.Now()
	ereq := *req.Exec
	stdio := [3]int{int(null.Fd()), int(pipes[0][1].Fd()), int(pipes[1][1].Fd())}
	var p Process
	if de, ok := c.s.sb.(DetachedExecer); ok {
		p, err = de.ExecDetached(id, &ereq, stdio)
	} else {
		p, err = c.s.sb.Exec(&ereq, stdio)
	}
	null.Close()
	if err != nil {
		cleanup()
		fail(err)
		return
	}
	// The command has its own copies of the write ends.
	pipes[0][1].Close()
	pipes[1][1].Close()
	cmd := &detachedCmd{proc: p, done: make(chan struct{}), info: sandbox.DetachedCommand{
		ID: id, Command: append([]string(nil), ereq.Args...), Pid: p.Pid(), Status: sandbox.DetachedRunning, StartedAt: start.UTC(),
	}}
	for i := range files {
		w := &capWriter{f: files[i], limit: sandbox.DetachedLogCap}
		cmd.out[i] = w
		go func(r, f *os.File) {
			_, _ = io.Copy(w, r)
			r.Close()
			f.Close()
		}(pipes[i][0], files[i])
	}
	writeMeta(dir, &cmd.info)
	d.admitted(cmd)
	entered = true
	d.prune()
	// One answer (no Started: that would keep the request pending in
	// the client for an Exited that never comes).
	_ = c.conn.Send(Response{ID: req.ID, Detached: []sandbox.DetachedCommand{cmd.snapshot()}})

	c.s.watchDetached(cmd, dir, start, ereq.TimeoutMS)
}

// watchDetached waits for the detached command cmd (its record in dir,
// started at start) to end, killing it after timeoutMS when > 0, and
// records its end.
func (s *Server) watchDetached(cmd *detachedCmd, dir string, start time.Time, timeoutMS int64) {
	p, id := cmd.proc, cmd.info.ID
	var timer *time.Timer
	timedOut := make(chan struct{})
	if timeoutMS > 0 {
		timer = time.AfterFunc(time.Duration(timeoutMS)*time.Millisecond, func() {
			close(timedOut)
			killProc(p)
		})
	}
	go func() {
		ws := p.Wait()
		if timer != nil {
			timer.Stop()
		}
		code := exitCode(ws)
		now := time.Now().UTC()
		reason := "detached: id " + id
		info := cmd.snapshot()
		info.ExitCode, info.FinishedAt = &code, &now
		info.Status = sandbox.DetachedCompleted
		if code != 0 {
			info.Status = sandbox.DetachedFailed
		}
		select {
		case <-timedOut:
			info.Reason = "timed out"
			reason += " timed out"
		default:
		}
		// On disk first: whoever sees it ended finds its record written.
		writeMeta(dir, &info)
		cmd.mu.Lock()
		cmd.info.ExitCode, cmd.info.FinishedAt, cmd.info.Status = info.ExitCode, info.FinishedAt, info.Status
		if info.Reason != "" {
			cmd.info.Reason = info.Reason
		}
		cmd.mu.Unlock()
		close(cmd.done)
		s.audit(ExecEnd{Args: info.Command, ExitCode: code, Duration: time.Since(start), Reason: reason})
	}()
}

// maxDetachedKept bounds the records of ended detached commands a
// server keeps (with their output): past it, the oldest ended ones go.
const maxDetachedKept = 64

// prune forgets the oldest ended commands past maxDetachedKept, and
// removes their directories.
func (d *detachedSet) prune() {
	d.mu.Lock()
	var ended []*detachedCmd
	for _, cmd := range d.cmds {
		select {
		case <-cmd.done:
			ended = append(ended, cmd)
		default:
		}
	}
	if len(ended) <= maxDetachedKept {
		d.mu.Unlock()
		return
	}
	sort.Slice(ended, func(i, j int) bool { return ended[i].snapshot().StartedAt.Before(ended[j].snapshot().StartedAt) })
	var gone []string
	for _, cmd := range ended[:len(ended)-maxDetachedKept] {
		delete(d.cmds, cmd.info.ID)
		gone = append(gone, cmd.info.ID)
	}
	d.mu.Unlock()
	for _, id := range gone {
		_ = os.RemoveAll(filepath.Join(d.dir, id))
	}
}

// exitCode is a wait status in the shell's convention.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// killProc kills p and its process group (the command leads a session
// of its own, so its group is what it started and did not move
// elsewhere).
func killProc(p Process) {
	_ = p.SignalGroup(syscall.SIGKILL)
	_ = p.Signal(syscall.SIGKILL)
}

// lookup finds detached command id (KindNotFound when unknown).
func (c *serverConn) lookupDetached(req Request) *detachedCmd {
	d := c.s.det
	if d == nil {
		_ = c.conn.Send(Response{ID: req.ID, Error: "detached commands are not available in this sandbox", Kind: KindSetup})
		return nil
	}
	d.mu.Lock()
	cmd := d.cmds[req.CmdID]
	d.mu.Unlock()
	if cmd == nil {
		_ = c.conn.Send(Response{ID: req.ID, Error: fmt.Sprintf("no detached command %q", req.CmdID), Kind: KindNotFound})
	}
	return cmd
}

// detached answers OpDetached: every command, oldest first, or one.
func (c *serverConn) detached(req Request) {
	if req.CmdID != "" {
		if cmd := c.lookupDetached(req); cmd != nil {
			_ = c.conn.Send(Response{ID: req.ID, Detached: []sandbox.DetachedCommand{cmd.snapshot()}})
		}
		return
	}
	d := c.s.det
	if d == nil {
		_ = c.conn.Send(Response{ID: req.ID, Error: "detached commands are not available in this sandbox", Kind: KindSetup})
		return
	}
	d.mu.Lock()
	out := make([]sandbox.DetachedCommand, 0, len(d.cmds))
	for _, cmd := range d.cmds {
		out = append(out, cmd.snapshot())
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) {
			return out[i].StartedAt.Before(out[j].StartedAt)
		}
		return out[i].ID < out[j].ID
	})
	// One message holds the answer: the newest that fit.
	for len(out) > 0 {
		if b, err := json.Marshal(out); err == nil && len(b) < MaxMessage-1024 {
			break
		}
		out = out[1:]
	}
	_ = c.conn.Send(Response{ID: req.ID, Detached: out})
}

// detachedLogs answers OpDetachedLogs into file.
func (c *serverConn) detachedLogs(req Request, file *os.File) {
	cmd := c.lookupDetached(req)
	if cmd == nil {
		return
	}
	if req.Stream != "stdout" && req.Stream != "stderr" {
		_ = c.conn.Send(Response{ID: req.ID, Error: "stream: stdout or stderr", Kind: KindSetup})
		return
	}
	f, err := os.Open(filepath.Join(c.s.det.dir, req.CmdID, req.Stream))
	if err != nil {
		c.fail(req.ID, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		c.fail(req.ID, err)
		return
	}
	// The size now bounds the copy: what the command writes meanwhile
	// is for the next read.
	size := st.Size()
	if req.Offset < 0 || req.Offset > size {
		_ = c.conn.Send(Response{ID: req.ID, Error: fmt.Sprintf("offset %d is past the end of %s (%d bytes)", req.Offset, req.Stream, size),
			Kind: KindRange, Size: size})
		return
	}
	n, err := io.Copy(file, io.NewSectionReader(f, req.Offset, size-req.Offset))
	file.Close()
	if err != nil {
		c.fail(req.ID, err)
		return
	}
	_ = c.conn.Send(Response{ID: req.ID, Size: n})
}

// detachedKill answers OpDetachedKill once the command has ended.
func (c *serverConn) detachedKill(req Request) {
	cmd := c.lookupDetached(req)
	if cmd == nil {
		return
	}
	select {
	case <-cmd.done:
	default:
		cmd.mu.Lock()
		if cmd.info.Reason == "" {
			cmd.info.Reason = "killed"
		}
		cmd.mu.Unlock()
		killProc(cmd.proc)
		select {
		case <-cmd.done:
		case <-time.After(10 * time.Second):
			_ = c.conn.Send(Response{ID: req.ID, Error: "the command did not end within 10 s of SIGKILL", Kind: KindSetup})
			return
		}
	}
	_ = c.conn.Send(Response{ID: req.ID, Detached: []sandbox.DetachedCommand{cmd.snapshot()}})
}
