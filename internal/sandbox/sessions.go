package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/audit"
)

// Sessions: a named agent session is a persistent sandbox called
// session-NAME plus a small metadata file, <data-dir>/sessions/NAME.json,
// that says which agent it is for, whether it runs, was stopped or
// saved, and which snapshot a save made. Every step is a Manager call
// (Create, Start, Stop, TakeSnapshot, RestoreSnapshot, Remove); the
// metadata is replaced whole (atomicfile) after the step succeeded, so
// a crash leaves the previous state. How many commands ran and when the
// session was last used come from the audit log's entries of its
// sandbox at list time: nothing is written on the exec path.

// Session statuses.
const (
	SessionRunning = "running"
	SessionStopped = "stopped"
	SessionSaved   = "saved"
)

// SessionSandboxPrefix starts the name of every session's sandbox.
const SessionSandboxPrefix = "session-"

// Errors of sessions (exit 125 in the CLI).
var (
	// ErrSessionNotFound means no session has that name.
	ErrSessionNotFound = errors.New("session not found")
	// ErrSessionExists means the session name is taken.
	ErrSessionExists = errors.New("session already exists")
	// ErrSessionGone means the session's sandbox was removed and there
	// is no snapshot to bring it back from.
	ErrSessionGone = errors.New("session's sandbox is gone and no snapshot was saved")
)

// Session is one session's metadata (upstream's fields).
type Session struct {
	Name       string    `json:"name"`
	Sandbox    string    `json:"sandbox"`
	Agent      string    `json:"agent"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
	LastActive time.Time `json:"last_active"`
	ExecCount  int       `json:"exec_count"`
	// Snapshot is the snapshot the last save made (null before any).
	Snapshot *string `json:"snapshot"`
}

// maxSessionFile bounds what is read of one metadata file.
const maxSessionFile = 64 << 10

// SessionSandbox is the name of the sandbox of session name.
func SessionSandbox(name string) string { return SessionSandboxPrefix + name }

// ValidateSessionName checks a session name: the sandbox names' rule,
// for the name itself (it is a file name in the data directory) and for
// session-NAME (at most 63 characters in all).
func ValidateSessionName(name string) error {
	if err := ValidateName(name); err != nil {
		return errors.New(strings.Replace(err.Error(), "sandbox name", "session name", 1))
	}
	if err := ValidateName(SessionSandbox(name)); err != nil {
		return fmt.Errorf("session name %q: too long (at most %d characters, the sandbox is %s<name>)", name, 63-len(SessionSandboxPrefix), SessionSandboxPrefix)
	}
	return nil
}

// ValidateSessionAgent checks the agent a session is for: 1-63 letters,
// digits, '.', '-' and '_', starting with a letter or digit (it is
// printed in list's table as it is).
func ValidateSessionAgent(agent string) error {
	if agent == "" {
		return errors.New("session: no agent given (--agent claude, codex, gemini, opencode, …)")
	}
	ok := len(agent) <= 63
	for i := 0; ok && i < len(agent); i++ {
		c := agent[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = alnum || i > 0 && (c == '.' || c == '-' || c == '_')
	}
	if !ok {
		return fmt.Errorf("agent %q: use 1-63 letters, digits, '.', '-' and '_', starting with a letter or digit", agent)
	}
	return nil
}

// DefaultSessionSnapshotName is the snapshot a save of session name at t
// makes: <name>-YYYYMMDD-HHMMSS (the name shortened to keep the whole
// valid), so that several saves a day each keep their own.
func DefaultSessionSnapshotName(name string, t time.Time) string {
	suffix := "-" + t.UTC().Format("20060102-150405")
	if len(name)+len(suffix) > 63 {
		name = strings.TrimRight(name[:63-len(suffix)], "-_")
	}
	return name + suffix
}

// Sessions keeps the sessions of one data directory over a Manager.
type Sessions struct {
	// Dir holds the metadata files (<data-dir>/sessions).
	Dir string
	M   *Manager
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (s *Sessions) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Sessions) path(name string) string { return filepath.Join(s.Dir, name+".json") }

// lock serialises the commands on session name (its NAME.lock beside its
// metadata): each reads the metadata, calls the Manager and writes the
// metadata back, and two at once would lose one's change.
func (s *Sessions) lock(name string) (func(), error) {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, err
	}
	return atomicfile.Lock(filepath.Join(s.Dir, name+".lock"))
}

// load reads the metadata of session name.
func (s *Sessions) load(name string) (*Session, error) {
	if err := ValidateSessionName(name); err != nil {
		return nil, err
	}
	return s.read(s.path(name), name)
}

func (s *Sessions) read(path, name string) (*Session, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("session %q: %w", name, ErrSessionNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("session %q: %s is not a regular file", name, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSessionFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSessionFile {
		return nil, fmt.Errorf("session %q: %s is too large", name, path)
	}
	var ses Session
	if err := json.Unmarshal(b, &ses); err != nil {
		return nil, fmt.Errorf("session %q: %s: %v", name, path, err)
	}
	// The file names the session; its content cannot point elsewhere.
	if ses.Name != name || ses.Sandbox != SessionSandbox(name) {
		return nil, fmt.Errorf("session %q: %s names session %q (sandbox %q)", name, path, ses.Name, ses.Sandbox)
	}
	switch ses.Status {
	case SessionRunning, SessionStopped, SessionSaved:
	default:
		return nil, fmt.Errorf("session %q: %s: unknown status %q", name, path, ses.Status)
	}
	if ses.Snapshot != nil && ValidateSnapshotName(*ses.Snapshot) != nil {
		return nil, fmt.Errorf("session %q: %s: invalid snapshot name %q", name, path, *ses.Snapshot)
	}
	return &ses, nil
}

// write replaces the metadata of ses.
func (s *Sessions) write(ses *Session) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(ses, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path(ses.Name), append(b, '\n'), 0o600)
}

// StartSession is what a new session is made of: its name, its agent and
// the sandbox to create (Create.Name is set here; Create.Start too).
type StartSession struct {
	Name   string
	Agent  string
	Create CreateRequest
}

// Start creates and starts the session's sandbox, then records the
// session (running). ErrSessionExists when the name is taken;
// ErrSandboxExists when a sandbox session-NAME exists without a session.
func (s *Sessions) Start(ctx context.Context, req StartSession) (*Session, error) {
	if err := ValidateSessionName(req.Name); err != nil {
		return nil, err
	}
	if err := ValidateSessionAgent(req.Agent); err != nil {
		return nil, err
	}
	unlock, err := s.lock(req.Name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := s.load(req.Name); err == nil {
		return nil, fmt.Errorf("session %q: %w", req.Name, ErrSessionExists)
	} else if !errors.Is(err, ErrSessionNotFound) {
		return nil, err
	}
	cr := req.Create
	cr.Name = SessionSandbox(req.Name)
	cr.Start = true
	cr.Reuse = false
	if _, err := s.M.Get(ctx, cr.Name); err == nil {
		return nil, fmt.Errorf("sandbox %s: %w", cr.Name, ErrSandboxExists)
	} else if !errors.Is(err, ErrSandboxNotFound) {
		return nil, err
	}
	if _, _, err := s.M.Create(ctx, cr); err != nil {
		return nil, err // the Manager removed a sandbox it made and could not start
	}
	now := s.now()
	ses := &Session{Name: req.Name, Sandbox: cr.Name, Agent: req.Agent, Status: SessionRunning, CreatedAt: now, LastActive: now}
	if err := s.write(ses); err != nil {
		return nil, fmt.Errorf("session %q: sandbox %s started, but its metadata could not be written: %w", req.Name, cr.Name, err)
	}
	return ses, nil
}

// Get returns session name with its exec count and last activity from
// the audit log.
func (s *Sessions) Get(ctx context.Context, name string) (*Session, error) {
	ses, err := s.load(name)
	if err != nil {
		return nil, err
	}
	s.fill(ctx, []*Session{ses})
	return ses, nil
}

// List returns every session, the most recently active first. A
// running session whose sandbox stopped (or is gone) shows stopped.
// Files that are not a session's are skipped.
func (s *Sessions) List(ctx context.Context) ([]*Session, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []*Session{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []*Session{}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || ValidateSessionName(name) != nil {
			continue
		}
		ses, err := s.read(filepath.Join(s.Dir, e.Name()), name)
		if err != nil {
			continue
		}
		out = append(out, ses)
	}
	s.fill(ctx, out)
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].LastActive.Equal(out[j].LastActive) {
			return out[i].LastActive.After(out[j].LastActive)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// fill adds the audit log's exec entries of each session's sandbox
// since the session was created, and reconciles a running session with
// its sandbox.
func (s *Sessions) fill(ctx context.Context, list []*Session) {
	if len(list) == 0 {
		return
	}
	if s.M.opts.Audit != nil {
		entries, err := s.M.opts.Audit.Read(audit.Filter{})
		if err == nil {
			by := map[string]*Session{}
			for _, ses := range list {
				by[ses.Sandbox] = ses
			}
			for _, e := range entries {
				ses := by[e.Sandbox]
				if ses == nil || e.Time.Before(ses.CreatedAt) {
					continue
				}
				// A detached command's kill is an exec entry of its
				// own: the command was counted when it started.
				if e.Action == audit.ActionExec && !(strings.HasPrefix(e.Details, "detached: id ") && strings.HasSuffix(e.Details, " killed")) {
					ses.ExecCount++
				}
				if e.Time.After(ses.LastActive) {
					ses.LastActive = e.Time
				}
			}
		}
	}
	for _, ses := range list {
		if ses.Status != SessionRunning {
			continue
		}
		if info, err := s.M.Get(ctx, ses.Sandbox); err != nil || info.Status != StatusRunning {
			if err == nil || errors.Is(err, ErrSandboxNotFound) {
				ses.Status = SessionStopped
			}
		}
	}
}

// Stop stops the session's sandbox; the session is stopped (a saved one
// stays saved: its snapshot is what resume brings back).
func (s *Sessions) Stop(ctx context.Context, name string) (*Session, error) {
	unlock, err := s.lock(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ses, err := s.load(name)
	if err != nil {
		return nil, err
	}
	if _, err := s.M.Stop(ctx, ses.Sandbox); err != nil {
		if !errors.Is(err, ErrSandboxNotFound) || ses.Snapshot == nil {
			return nil, err
		}
	}
	if ses.Status == SessionRunning {
		ses.Status = SessionStopped
	}
	ses.LastActive = s.now()
	if err := s.write(ses); err != nil {
		return nil, err
	}
	return ses, nil
}

// Save snapshots the session's sandbox (running or stopped) as snapshot
// ("" for DefaultSessionSnapshotName); the session is saved and
// remembers the snapshot.
func (s *Sessions) Save(ctx context.Context, name, snapshot string) (*Session, *Snapshot, error) {
	unlock, err := s.lock(name)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	ses, err := s.load(name)
	if err != nil {
		return nil, nil, err
	}
	if snapshot == "" {
		snapshot = DefaultSessionSnapshotName(name, s.now())
	}
	snap, err := s.M.TakeSnapshot(ctx, ses.Sandbox, snapshot)
	if err != nil {
		return nil, nil, err
	}
	ses.Status = SessionSaved
	ses.Snapshot = &snap.Name
	ses.LastActive = s.now()
	if err := s.write(ses); err != nil {
		return nil, nil, fmt.Errorf("session %q: snapshot %s taken, but the session's metadata could not be written: %w", name, snap.Name, err)
	}
	return ses, snap, nil
}

// Resume starts the session's sandbox again; one that is gone is
// restored from the session's snapshot first (ErrSessionGone without
// one). restored says which.
func (s *Sessions) Resume(ctx context.Context, name string) (ses *Session, restored bool, err error) {
	unlock, err := s.lock(name)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	if ses, err = s.load(name); err != nil {
		return nil, false, err
	}
	if _, err := s.M.Get(ctx, ses.Sandbox); errors.Is(err, ErrSandboxNotFound) {
		if ses.Snapshot == nil {
			return nil, false, fmt.Errorf("session %q: sandbox %s: %w", name, ses.Sandbox, ErrSessionGone)
		}
		if _, err := s.M.RestoreSnapshot(ctx, *ses.Snapshot, ses.Sandbox); err != nil {
			return nil, false, err
		}
		restored = true
	} else if err != nil {
		return nil, false, err
	}
	if _, err := s.M.Start(ctx, ses.Sandbox); err != nil {
		return nil, restored, err
	}
	ses.Status = SessionRunning
	ses.LastActive = s.now()
	if err := s.write(ses); err != nil {
		return nil, restored, err
	}
	return ses, restored, nil
}

// Delete removes the session's metadata; its snapshots stay. With
// withSandbox its sandbox is removed too (stopped first; one already
// gone is fine).
func (s *Sessions) Delete(ctx context.Context, name string, withSandbox bool) (*Session, error) {
	unlock, err := s.lock(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ses, err := s.load(name)
	if err != nil {
		return nil, err
	}
	if withSandbox {
		if err := s.M.Remove(ctx, ses.Sandbox, true); err != nil && !errors.Is(err, ErrSandboxNotFound) {
			return nil, err
		}
	}
	if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return ses, atomicfile.SyncDir(s.Dir)
}
