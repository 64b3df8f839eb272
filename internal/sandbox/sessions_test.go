package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/audit"
)

// sessionMech is the mechanism under the session tests: memStore's
// records, started and stopped by flipping their status, and snapshots
// that remember which sandbox they were taken of.
type sessionMech struct {
	*memStore
	snaps    map[string]string // snapshot → sandbox
	failNext error             // the next Start fails with it
	// inTake, when set, is called while a snapshot is being taken.
	inTake func()
}

func (f *sessionMech) Start(ctx context.Context, name string) (*Info, error) {
	if err := f.failNext; err != nil {
		f.failNext = nil
		return nil, err
	}
	return f.Update(ctx, name, func(i *Info) error { i.Status = StatusRunning; return nil })
}

func (f *sessionMech) Stop(ctx context.Context, name, _ string) (*Info, error) {
	return f.Update(ctx, name, func(i *Info) error { i.Status = StatusStopped; return nil })
}

func (f *sessionMech) GC(context.Context, bool) (GCResult, error) { return GCResult{}, nil }

func (f *sessionMech) TakeSnapshot(ctx context.Context, sandbox, name string) (*Snapshot, error) {
	if _, err := f.Get(ctx, sandbox); err != nil {
		return nil, err
	}
	if f.inTake != nil {
		f.inTake()
	}
	if _, ok := f.snaps[name]; ok {
		return nil, ErrSnapshotExists
	}
	f.snaps[name] = sandbox
	return &Snapshot{Name: name, Sandbox: sandbox}, nil
}

func (f *sessionMech) ListSnapshots(context.Context) ([]*Snapshot, error) { return nil, nil }

func (f *sessionMech) GetSnapshot(_ context.Context, name string) (*Snapshot, error) {
	sb, ok := f.snaps[name]
	if !ok {
		return nil, ErrSnapshotNotFound
	}
	return &Snapshot{Name: name, Sandbox: sb}, nil
}

func (f *sessionMech) RestoreSnapshot(ctx context.Context, name, as string) (*Info, error) {
	if _, ok := f.snaps[name]; !ok {
		return nil, ErrSnapshotNotFound
	}
	info := &Info{Name: as, Status: StatusStopped, Labels: map[string]string{"from": name}}
	if err := f.Create(ctx, info, &Spec{}); err != nil {
		return nil, err
	}
	return f.Get(ctx, as)
}

func (f *sessionMech) DeleteSnapshot(_ context.Context, name string) error {
	delete(f.snaps, name)
	return nil
}

func newSessions(t *testing.T) (*Sessions, *sessionMech, *audit.Log, *time.Time) {
	t.Helper()
	dir := t.TempDir()
	mech := &sessionMech{memStore: newMemStore(), snaps: map[string]string{}}
	log := audit.New(dir)
	m := NewManager(ManagerOptions{Store: mech, Supervisor: mech, Audit: log, Who: "test"})
	// The Manager's own audit entries carry the real time.
	now := time.Now().UTC().Truncate(time.Second)
	return &Sessions{Dir: filepath.Join(dir, "sessions"), M: m, Now: func() time.Time { return now }}, mech, log, &now
}

func startReq(name string) StartSession {
	return StartSession{Name: name, Agent: "claude", Create: CreateRequest{Spec: &Spec{Rootfs: hostRootfs()}}}
}

// TestSessionStateMachine walks one session through start, save, stop,
// removal of its sandbox by hand, resume (restored from the snapshot)
// and delete, checking the metadata file after each step.
func TestSessionStateMachine(t *testing.T) {
	ctx := context.Background()
	s, mech, log, now := newSessions(t)

	ses, err := s.Start(ctx, startReq("work"))
	if err != nil || ses.Sandbox != "session-work" || ses.Status != SessionRunning || ses.Snapshot != nil {
		t.Fatalf("start: %+v %v", ses, err)
	}
	if i, err := mech.Get(ctx, "session-work"); err != nil || i.Status != StatusRunning {
		t.Fatalf("sandbox after start: %+v %v", i, err)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "work.json"))
	if err != nil || !strings.Contains(string(b), `"snapshot": null`) || !strings.Contains(string(b), `"agent": "claude"`) {
		t.Fatalf("metadata file: %s %v", b, err)
	}
	// A duplicate is refused, and nothing changes.
	if _, err := s.Start(ctx, startReq("work")); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("duplicate start: %v", err)
	}

	// Two execs in the audit log, one before the session existed (an
	// older sandbox of the same name) that does not count.
	old := *now
	_ = log.Append(audit.Entry{Time: old.Add(-time.Hour), Sandbox: "session-work", Action: audit.ActionExec})
	_ = log.Append(audit.Entry{Time: old.Add(time.Minute), Sandbox: "session-work", Action: audit.ActionExec})
	_ = log.Append(audit.Entry{Time: old.Add(90 * time.Second), Sandbox: "session-work", Action: audit.ActionExec, Details: "detached: id 1a2b"})
	_ = log.Append(audit.Entry{Time: old.Add(2 * time.Minute), Sandbox: "session-work", Action: audit.ActionExec, Details: "detached: id 1a2b killed"})
	_ = log.Append(audit.Entry{Time: old.Add(3 * time.Minute), Sandbox: "other", Action: audit.ActionExec})
	got, err := s.Get(ctx, "work")
	if err != nil || got.ExecCount != 2 || !got.LastActive.Equal(old.Add(2*time.Minute)) {
		t.Fatalf("exec count and last activity: %+v %v", got, err)
	}

	*now = now.Add(time.Hour)
	ses, snap, err := s.Save(ctx, "work", "")
	want := "work-" + now.Format("20060102-150405")
	if err != nil || ses.Status != SessionSaved || snap.Name != want || ses.Snapshot == nil || *ses.Snapshot != snap.Name {
		t.Fatalf("save: %+v %+v %v", ses, snap, err)
	}
	if mech.snaps[want] != "session-work" {
		t.Fatalf("snapshot taken of: %v", mech.snaps)
	}
	// A save at the same second would take the same name: refused as
	// the snapshot's, and the session keeps its state.
	if _, _, err := s.Save(ctx, "work", ""); !errors.Is(err, ErrSnapshotExists) {
		t.Fatalf("second save in the same second: %v", err)
	}

	if ses, err = s.Stop(ctx, "work"); err != nil || ses.Status != SessionSaved {
		t.Fatalf("stop of a saved session: %+v %v", ses, err)
	}
	if i, _ := mech.Get(ctx, "session-work"); i.Status != StatusStopped {
		t.Fatalf("sandbox after stop: %+v", i)
	}
	// The sandbox removed by hand: resume restores it from the snapshot.
	if err := mech.Remove(ctx, "session-work", true); err != nil {
		t.Fatal(err)
	}
	ses, restored, err := s.Resume(ctx, "work")
	if err != nil || !restored || ses.Status != SessionRunning {
		t.Fatalf("resume from snapshot: %+v %v %v", ses, restored, err)
	}
	if i, err := mech.Get(ctx, "session-work"); err != nil || i.Status != StatusRunning || i.Labels["from"] != want {
		t.Fatalf("restored sandbox: %+v %v", i, err)
	}
	// A stopped one is only started again.
	if _, err := s.Stop(ctx, "work"); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.List(ctx); len(l) != 1 || l[0].Status != SessionStopped {
		t.Fatalf("list after stop: %+v", l)
	}
	if ses, restored, err = s.Resume(ctx, "work"); err != nil || restored || ses.Status != SessionRunning {
		t.Fatalf("resume of a stopped session: %+v %v %v", ses, restored, err)
	}

	// Delete: metadata only; the sandbox and the snapshot stay.
	if _, err := s.Delete(ctx, "work", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "work.json")); !os.IsNotExist(err) {
		t.Fatalf("metadata after delete: %v", err)
	}
	if _, err := mech.Get(ctx, "session-work"); err != nil || len(mech.snaps) != 1 {
		t.Fatalf("delete touched the sandbox or snapshot: %v %v", err, mech.snaps)
	}
	for name, op := range map[string]func() error{
		"get":    func() error { _, err := s.Get(ctx, "work"); return err },
		"stop":   func() error { _, err := s.Stop(ctx, "work"); return err },
		"save":   func() error { _, _, err := s.Save(ctx, "work", ""); return err },
		"resume": func() error { _, _, err := s.Resume(ctx, "work"); return err },
		"delete": func() error { _, err := s.Delete(ctx, "work", false); return err },
	} {
		if err := op(); !errors.Is(err, ErrSessionNotFound) {
			t.Errorf("%s of a deleted session: %v", name, err)
		}
	}
	// The sandbox of the deleted session still holds the name.
	if _, err := s.Start(ctx, startReq("work")); !errors.Is(err, ErrSandboxExists) {
		t.Fatalf("start over a leftover sandbox: %v", err)
	}
}

// TestSessionResumeWithoutSnapshot: a session whose sandbox is gone and
// that was never saved cannot come back, and says so.
func TestSessionResumeWithoutSnapshot(t *testing.T) {
	ctx := context.Background()
	s, mech, _, _ := newSessions(t)
	if _, err := s.Start(ctx, startReq("a")); err != nil {
		t.Fatal(err)
	}
	_ = mech.Remove(ctx, "session-a", true)
	if _, _, err := s.Resume(ctx, "a"); !errors.Is(err, ErrSessionGone) || !strings.Contains(err.Error(), "session-a") {
		t.Fatalf("resume without sandbox or snapshot: %v", err)
	}
	if l, _ := s.List(ctx); len(l) != 1 || l[0].Status != SessionStopped {
		t.Fatalf("list shows a session whose sandbox is gone as: %+v", l)
	}
	// The snapshot deleted after the save: the snapshot's error.
	if _, err := s.Start(ctx, startReq("b")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Save(ctx, "b", "b-snap"); err != nil {
		t.Fatal(err)
	}
	_ = mech.Remove(ctx, "session-b", true)
	delete(mech.snaps, "b-snap")
	if _, _, err := s.Resume(ctx, "b"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("resume from a deleted snapshot: %v", err)
	}
	// --with-sandbox on a gone sandbox is fine.
	if _, err := s.Delete(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
}

// TestSessionStartAllOrNothing: a sandbox that cannot start is removed
// again, and no session is recorded.
func TestSessionStartAllOrNothing(t *testing.T) {
	ctx := context.Background()
	s, mech, _, _ := newSessions(t)
	mech.failNext = errors.New("boot failed")
	if _, err := s.Start(ctx, startReq("x")); err == nil || !strings.Contains(err.Error(), "boot failed") {
		t.Fatalf("start: %v", err)
	}
	if _, err := mech.Get(ctx, "session-x"); !errors.Is(err, ErrSandboxNotFound) {
		t.Fatalf("sandbox left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "x.json")); !os.IsNotExist(err) {
		t.Fatalf("metadata left behind: %v", err)
	}
	if _, err := s.Start(ctx, startReq("x")); err != nil {
		t.Fatalf("start after a failed one: %v", err)
	}
}

// TestSessionHostileNames: names that would leave the sessions
// directory, or make an invalid sandbox name, are refused before any
// file is touched; a metadata file that names another session or
// sandbox is not believed.
func TestSessionHostileNames(t *testing.T) {
	ctx := context.Background()
	s, mech, _, _ := newSessions(t)
	outside := filepath.Join(filepath.Dir(s.Dir), "victim.json")
	if err := os.WriteFile(outside, []byte(`{"name":"../victim","sandbox":"session-../victim","status":"running"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"", "../victim", "a/b", ".", "..", "-x", "a--b", strings.Repeat("a", 56), "a\x00b", "a.json"} {
		if _, err := s.Start(ctx, startReq(n)); err == nil || !strings.Contains(err.Error(), "session name") {
			t.Errorf("start %q: %v", n, err)
		}
		if _, err := s.Delete(ctx, n, true); err == nil || errors.Is(err, ErrSessionNotFound) {
			t.Errorf("delete %q: %v", n, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatalf("a file outside the sessions directory went: %v", err)
	}
	if len(mech.recs) != 0 {
		t.Fatalf("sandboxes made: %v", mech.recs)
	}
	// The longest valid name makes a valid sandbox name.
	if _, err := s.Start(ctx, startReq(strings.Repeat("a", 55))); err != nil {
		t.Fatalf("55 characters: %v", err)
	}
	if n := DefaultSessionSnapshotName(strings.Repeat("a", 55), time.Now()); ValidateSnapshotName(n) != nil {
		t.Fatalf("default snapshot name of a long session: %q", n)
	}

	// A planted file that points at another sandbox is refused.
	if err := os.WriteFile(filepath.Join(s.Dir, "evil.json"), []byte(`{"name":"evil","sandbox":"prod","agent":"x","status":"running"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, "evil", true); err == nil || !strings.Contains(err.Error(), `"prod"`) {
		t.Fatalf("delete of a session naming another sandbox: %v", err)
	}
	// A snapshot name that is not one.
	if err := os.WriteFile(filepath.Join(s.Dir, "snap.json"), []byte(`{"name":"snap","sandbox":"session-snap","agent":"x","status":"saved","snapshot":"../../x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Resume(ctx, "snap"); err == nil || !strings.Contains(err.Error(), "invalid snapshot name") {
		t.Fatalf("resume of a session with a bad snapshot name: %v", err)
	}
	// List skips what it cannot believe and keeps the rest.
	l, err := s.List(ctx)
	if err != nil || len(l) != 1 || l[0].Name != strings.Repeat("a", 55) {
		t.Fatalf("list: %+v %v", l, err)
	}
}

// TestSessionListOrder: the most recently active session first.
func TestSessionListOrder(t *testing.T) {
	ctx := context.Background()
	s, _, log, now := newSessions(t)
	for i, n := range []string{"a", "b", "c"} {
		*now = now.Add(time.Duration(i) * time.Minute)
		if _, err := s.Start(ctx, startReq(n)); err != nil {
			t.Fatal(err)
		}
	}
	// a is used last (an exec in the audit log).
	_ = log.Append(audit.Entry{Time: now.Add(time.Hour), Sandbox: "session-a", Action: audit.ActionExec})
	l, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range l {
		names = append(names, fmt.Sprintf("%s:%d", x.Name, x.ExecCount))
	}
	if got := strings.Join(names, " "); got != "a:1 c:0 b:0" {
		t.Fatalf("order: %s", got)
	}
}

// TestSessionCommandsSerialised: a delete that comes while a save is
// taking its snapshot waits for it, so the session is gone afterwards
// (without the session's lock the save wrote its metadata back after
// the delete, and the deleted session came back).
func TestSessionCommandsSerialised(t *testing.T) {
	ses, mech, _, _ := newSessions(t)
	ctx := context.Background()
	if _, err := ses.Start(ctx, startReq("s")); err != nil {
		t.Fatal(err)
	}
	taking := make(chan struct{})
	mech.inTake = func() {
		close(taking)
		time.Sleep(300 * time.Millisecond) // room for the delete, if it were let in
	}
	saved := make(chan error, 1)
	go func() {
		_, _, err := ses.Save(ctx, "s", "snap1")
		saved <- err
	}()
	<-taking
	if _, err := ses.Delete(ctx, "s", false); err != nil {
		t.Fatal(err)
	}
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
	if got, err := ses.Get(ctx, "s"); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("after save then delete: %+v, %v; want ErrSessionNotFound", got, err)
	}
}
