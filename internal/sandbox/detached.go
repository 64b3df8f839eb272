package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/audit"
)

// This file is the Manager's side of exec beyond one foreground command:
// the per-call timeout and what a dead client leaves in the audit log,
// detached commands (started, listed, read, killed), and the lookups the
// SDKs' newer calls need (a sandbox by UUID, the names gc removed).

// Statuses of a detached command, as the SDKs know them.
const (
	DetachedRunning   = "running"
	DetachedCompleted = "completed" // exited with code 0
	DetachedFailed    = "failed"    // a non-zero code, a signal, killed, or the sandbox stopped
)

// DetachedLogCap is how much of each stream (stdout, stderr) of a
// detached command is kept on disk: past it, writing stops with
// DetachedLogMarker appended and the rest of the stream is read and
// dropped, so the command never blocks on a full pipe.
const DetachedLogCap = 16 << 20

// DetachedLogMarker ends a stream that reached DetachedLogCap.
const DetachedLogMarker = "\n[agentkernel: output past 16 MiB dropped]\n"

// DetachedCommand is a command started with ExecDetached: owned by the
// sandbox's supervisor, not by the client that started it, so it runs
// on when that client goes; its stdout and stderr are kept under the
// sandbox's directory (detached/ID/), DetachedLogCap each.
type DetachedCommand struct {
	ID      string   `json:"id"`
	Sandbox string   `json:"sandbox"`
	Command []string `json:"command"`
	// Pid is the command's pid inside the sandbox.
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	// ExitCode is set once it ended (128+N for signal N); nil while it
	// runs, or when the sandbox stopped under it.
	ExitCode   *int       `json:"exit_code"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Reason says why a failed command ended when its code does not:
	// "killed", "timed out", "sandbox stopped".
	Reason      string `json:"reason,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
}

// DetachedConn is what a Conn offers for detached commands (the agent's
// connection does; a Conn without it makes these calls ErrUnsupported).
type DetachedConn interface {
	// ExecDetached starts req (stdin empty, stdout and stderr to the
	// sandbox's log files) and returns once it runs.
	ExecDetached(ctx context.Context, req ExecRequest) (DetachedCommand, error)
	// Detached lists the sandbox's detached commands (id "") or
	// describes one (ErrDetachedNotFound).
	Detached(ctx context.Context, id string) ([]DetachedCommand, error)
	// DetachedLogs copies stream ("stdout" or "stderr") of command id
	// from offset to w (ErrLogOffset past the end).
	DetachedLogs(ctx context.Context, id, stream string, offset int64, w io.Writer) (int64, error)
	// KillDetached kills command id (SIGKILL) and returns it once it
	// has ended; one that has already ended is returned as it is.
	KillDetached(ctx context.Context, id string) (DetachedCommand, error)
}

// MaxDetachedRunning is how many detached commands one sandbox may run at
// once: each holds two log files of up to DetachedLogCap on the host's
// disk, so an unbounded number would let one client fill it.
const MaxDetachedRunning = 64

var (
	// ErrDetachedNotFound means the sandbox has no detached command of
	// that id.
	ErrDetachedNotFound = errors.New("detached command not found")
	// ErrLogOffset means a log was asked for from past its end.
	ErrLogOffset = errors.New("offset past the end of the log")
	// ErrDetachedLimit means the sandbox already runs as many detached
	// commands as it may (MaxDetachedRunning).
	ErrDetachedLimit = errors.New("too many detached commands running")
	// ErrInvalidID means a detached command's id is malformed.
	ErrInvalidID = errors.New("invalid detached command id: 16 lowercase hex digits")
	// ErrInvalidUUID means a sandbox UUID is malformed.
	ErrInvalidUUID = errors.New("Invalid sandbox UUID")
)

// ValidDetachedID checks a detached command's id (ErrInvalidID): ids
// name directories, so nothing else is ever looked up. (No regexp: the
// agentkernel binary links this package.)
func ValidDetachedID(id string) error {
	ok := len(id) == 16
	for i := 0; ok && i < len(id); i++ {
		ok = isHex(id[i], false)
	}
	if !ok {
		return fmt.Errorf("%q: %w", id, ErrInvalidID)
	}
	return nil
}

func isHex(c byte, upper bool) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || upper && 'A' <= c && c <= 'F'
}

// validUUID checks the 8-4-4-4-12 hex form of a UUID (any case).
func validUUID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch i {
		case 8, 13, 18, 23:
			if id[i] != '-' {
				return false
			}
		default:
			if !isHex(id[i], true) {
				return false
			}
		}
	}
	return true
}

// execBounded runs req over c, ended after req.Timeout: a command that
// ran past it is reported as exit code 124 with TimedOut.
func execBounded(ctx context.Context, c Conn, req ExecRequest, stdio Stdio, signals <-chan os.Signal) (Result, error) {
	if req.Timeout <= 0 {
		return c.Exec(ctx, req, stdio, signals)
	}
	tctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	res, err := c.Exec(tctx, req, stdio, signals)
	if err != nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
		return Result{ExitCode: 124, Signal: res.Signal, TimedOut: true}, nil
	}
	return res, err
}

// execEndDetails is what the audit entry of an exec adds about how it
// ended when the command did not end by itself: killed at its timeout,
// or because the client that ran it went away.
func execEndDetails(ctx context.Context, req ExecRequest, res Result, err error) string {
	switch {
	case res.TimedOut:
		return fmt.Sprintf("timed out after %s: the command was killed", req.Timeout)
	case err != nil && ctx.Err() != nil:
		return "client gone: the command was killed"
	}
	return ""
}

// detachedConn opens a connection to the running sandbox name that
// offers detached commands.
func (m *Manager) detachedConn(ctx context.Context, name string) (DetachedConn, func(), error) {
	c, err := m.Connect(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	dc, ok := c.(DetachedConn)
	if !ok {
		c.Close()
		return nil, nil, fmt.Errorf("detached commands: %w", ErrUnsupported)
	}
	return dc, func() { c.Close() }, nil
}

// ExecDetached starts a command in the running sandbox name that runs on
// without its caller (DetachedCommand). The sandbox's command rules
// apply as to Exec; the start is audited (with the command's id).
func (m *Manager) ExecDetached(ctx context.Context, name string, req ExecRequest) (*DetachedCommand, error) {
	if len(req.Args) == 0 {
		return nil, errors.New("no command given")
	}
	if req.TTY {
		return nil, errors.New("a detached command has no terminal")
	}
	dc, done, err := m.detachedConn(ctx, name)
	if err != nil {
		return nil, err
	}
	defer done()
	start := time.Now()
	var d DetachedCommand
	err = m.checkExec(ctx, name, req.Args)
	if err == nil {
		d, err = dc.ExecDetached(ctx, req)
	}
	e := audit.Entry{Sandbox: name, Action: audit.ActionExec, Command: req.Args}
	if err == nil {
		e.Details = "detached: id " + d.ID
	} else if code := startFailureCode(err); code != 0 {
		e.ExitCode = &code
	}
	m.audit(e, start, err)
	if err != nil {
		return nil, err
	}
	d.Sandbox = name
	return &d, nil
}

// DetachedList lists the detached commands of the running sandbox name,
// oldest first.
func (m *Manager) DetachedList(ctx context.Context, name string) ([]DetachedCommand, error) {
	dc, done, err := m.detachedConn(ctx, name)
	if err != nil {
		return nil, err
	}
	defer done()
	ds, err := dc.Detached(ctx, "")
	if err != nil {
		return nil, err
	}
	if ds == nil {
		ds = []DetachedCommand{}
	}
	for i := range ds {
		ds[i].Sandbox = name
	}
	return ds, nil
}

// DetachedStatus describes detached command id of sandbox name.
func (m *Manager) DetachedStatus(ctx context.Context, name, id string) (*DetachedCommand, error) {
	if err := ValidDetachedID(id); err != nil {
		return nil, err
	}
	dc, done, err := m.detachedConn(ctx, name)
	if err != nil {
		return nil, err
	}
	defer done()
	ds, err := dc.Detached(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(ds) != 1 {
		return nil, fmt.Errorf("%s: %w", id, ErrDetachedNotFound)
	}
	ds[0].Sandbox = name
	return &ds[0], nil
}

// DetachedLogs copies stream ("stdout" or "stderr") of detached command
// id from offset to w and returns how many bytes it copied. An offset
// past the end is ErrLogOffset, and nothing is copied.
func (m *Manager) DetachedLogs(ctx context.Context, name, id, stream string, offset int64, w io.Writer) (int64, error) {
	if err := ValidDetachedID(id); err != nil {
		return 0, err
	}
	if stream != "stdout" && stream != "stderr" {
		return 0, fmt.Errorf("stream %q: use stdout or stderr", stream)
	}
	if offset < 0 {
		return 0, fmt.Errorf("offset %d: %w", offset, ErrLogOffset)
	}
	dc, done, err := m.detachedConn(ctx, name)
	if err != nil {
		return 0, err
	}
	defer done()
	return dc.DetachedLogs(ctx, id, stream, offset, w)
}

// DetachedKill kills detached command id of sandbox name and returns it
// once it ended. The kill is audited.
func (m *Manager) DetachedKill(ctx context.Context, name, id string) (*DetachedCommand, error) {
	if err := ValidDetachedID(id); err != nil {
		return nil, err
	}
	dc, done, err := m.detachedConn(ctx, name)
	if err != nil {
		return nil, err
	}
	defer done()
	start := time.Now()
	d, err := dc.KillDetached(ctx, id)
	e := audit.Entry{Sandbox: name, Action: audit.ActionExec, Command: d.Command, ExitCode: d.ExitCode,
		Details: "detached: id " + id + " killed"}
	m.audit(e, start, err)
	if err != nil {
		return nil, err
	}
	d.Sandbox = name
	return &d, nil
}

// GetByUUID returns the sandbox whose UUID is id (ErrInvalidUUID for a
// malformed one, ErrSandboxNotFound for none).
func (m *Manager) GetByUUID(ctx context.Context, id string) (*Info, error) {
	if !validUUID(id) {
		return nil, ErrInvalidUUID
	}
	st, err := m.store()
	if err != nil {
		return nil, err
	}
	all, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, i := range all {
		if i.UUID != "" && strings.EqualFold(i.UUID, id) {
			return i, nil
		}
	}
	return nil, fmt.Errorf("sandbox with UUID %s: %w", id, ErrSandboxNotFound)
}

// GCSandboxes runs GC and returns the names of the sandboxes it removed
// (what the API's POST /gc reports; GC's Removed also names the cgroups,
// host ids and directories it freed), never nil.
func (m *Manager) GCSandboxes(ctx context.Context) ([]string, error) {
	res, err := m.GC(ctx, false)
	return append([]string{}, res.Sandboxes...), err
}
