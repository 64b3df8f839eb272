package supervisor

import (
	"context"
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// recordingReclaimer is a backend's sandbox.Reclaimer that records what
// it is asked to free.
type recordingReclaimer struct {
	cgroups  []string
	released []string // name and directory
	known    map[string]string
	dryRun   bool
}

func (r *recordingReclaimer) RemoveCgroups(id string) []string {
	r.cgroups = append(r.cgroups, id)
	return []string{"cgroup " + id}
}

func (r *recordingReclaimer) ReleaseIDs(spec *sandbox.Spec, dir string) error {
	r.released = append(r.released, spec.Name, dir)
	return nil
}

func (r *recordingReclaimer) ReleaseOrphanedIDs(known map[string]string, dryRun bool) ([]string, error) {
	r.known, r.dryRun = known, dryRun
	return []string{"host uid range of a gone sandbox"}, nil
}

// TestManagerReclaimsThroughBackend: the Manager (over a real state
// store) frees a sandbox's host resources through the backend's
// Reclaimer: a stopped sandbox's cgroups and the reservations of gone
// sandboxes at gc, its host ids at removal; without a Reclaimer the same
// operations work and free nothing.
func TestManagerReclaimsThroughBackend(t *testing.T) {
	ctx := context.Background()
	rec := &recordingReclaimer{}
	m := &Manager{DataDir: t.TempDir(), Reclaimer: rec}
	defer m.Close()
	info := &sandbox.Info{Name: "dev", Backend: "native"}
	spec := &sandbox.Spec{Image: "alpine:3.20"}
	if err := m.Create(ctx, info, spec); err != nil {
		t.Fatal(err)
	}
	if spec.ID == "" {
		t.Fatal("create assigned no backend id")
	}
	res, err := m.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	removed := res.Removed
	if !reflect.DeepEqual(rec.cgroups, []string{spec.ID}) || !reflect.DeepEqual(rec.known, map[string]string{"dev": spec.ID}) || rec.dryRun {
		t.Errorf("gc asked the backend: cgroups %q, known %v, dry run %v", rec.cgroups, rec.known, rec.dryRun)
	}
	if !slices.Contains(removed, "cgroup "+spec.ID) || !slices.Contains(removed, "host uid range of a gone sandbox") {
		t.Errorf("gc reported %q", removed)
	}
	// A dry run removes no cgroup.
	rec.cgroups = nil
	if _, err := m.GC(ctx, true); err != nil || rec.cgroups != nil || !rec.dryRun {
		t.Errorf("dry-run gc: %v, cgroups %q, dry run %v", err, rec.cgroups, rec.dryRun)
	}
	if err := m.Remove(ctx, "dev", false); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec.released, []string{"dev", m.Dir("dev")}) {
		t.Errorf("remove released %q", rec.released)
	}
	if _, err := os.Stat(m.Dir("dev")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory left: %v", err)
	}

	// Another backend's sandbox: its cgroups go through that backend's
	// remover, at gc and at removal, never through native's Reclaimer.
	other := &recordingReclaimer{}
	m.CgroupRemovers = map[string]sandbox.CgroupRemover{"gvisor": other}
	rec.cgroups = nil
	gspec := &sandbox.Spec{Image: "alpine:3.20", Backend: "gvisor"}
	if err := m.Create(ctx, &sandbox.Info{Name: "gv", Backend: "gvisor"}, gspec); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "gv", false); err != nil {
		t.Fatal(err)
	}
	if rec.cgroups != nil || !reflect.DeepEqual(other.cgroups, []string{gspec.ID, gspec.ID}) {
		t.Errorf("a gvisor sandbox's cgroups: native asked for %q, gvisor for %q (want %q twice)", rec.cgroups, other.cgroups, gspec.ID)
	}

	bare := &Manager{DataDir: t.TempDir()}
	defer bare.Close()
	if err := bare.Create(ctx, &sandbox.Info{Name: "dev"}, &sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
	if res, err := bare.GC(ctx, false); err != nil || len(res.Removed) != 0 || len(res.Sandboxes) != 0 {
		t.Errorf("gc without a reclaimer: %+v %v", res, err)
	}
	if err := bare.Remove(ctx, "dev", false); err != nil {
		t.Errorf("remove without a reclaimer: %v", err)
	}
}

// namingReclaimer frees a host id range whose description starts as an
// expired sandbox's line does.
type namingReclaimer struct{ recordingReclaimer }

func (r *namingReclaimer) ReleaseOrphanedIDs(map[string]string, bool) ([]string, error) {
	return []string{"sandbox gone (host uid range 524288-589823)"}, nil
}

// TestGCResultNamesRemovedSandboxes: GC's result names the expired
// sandboxes it removed, and only those, whatever the lines describing
// the rest look like; sandbox.Manager.GCSandboxes (POST /gc) reports
// exactly those names; a dry run names them and removes nothing.
func TestGCResultNamesRemovedSandboxes(t *testing.T) {
	ctx := context.Background()
	m := &Manager{DataDir: t.TempDir(), Reclaimer: &namingReclaimer{}}
	defer m.Close()
	past := time.Now().Add(-time.Hour)
	for _, name := range []string{"old", "keep"} {
		info := &sandbox.Info{Name: name, Backend: "test"}
		if name == "old" {
			info.ExpiresAt = &past
		}
		if err := m.Create(ctx, info, &sandbox.Spec{Image: "alpine:3.20"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := m.GC(ctx, true)
	if err != nil || !reflect.DeepEqual(res.Sandboxes, []string{"old"}) || !slices.Contains(res.Removed, "sandbox old (expired)") {
		t.Fatalf("dry-run gc: %+v %v", res, err)
	}
	if _, err := m.Get(ctx, "old"); err != nil {
		t.Fatalf("a dry run removed the sandbox: %v", err)
	}
	sm := sandbox.NewManager(sandbox.ManagerOptions{Store: m, Supervisor: m})
	names, err := sm.GCSandboxes(ctx)
	if err != nil || !reflect.DeepEqual(names, []string{"old"}) {
		t.Errorf("gc's sandboxes: %q %v", names, err)
	}
	if _, err := m.Get(ctx, "old"); !errors.Is(err, sandbox.ErrSandboxNotFound) {
		t.Errorf("the expired sandbox is still there: %v", err)
	}
	if names, err := sm.GCSandboxes(ctx); err != nil || names == nil || len(names) != 0 {
		t.Errorf("a gc with nothing expired: %#v %v", names, err)
	}
}
