package supervisor

import (
	"context"
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"

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
	info := &sandbox.Info{Name: "dev", Backend: "test"}
	spec := &sandbox.Spec{Image: "alpine:3.20"}
	if err := m.Create(ctx, info, spec); err != nil {
		t.Fatal(err)
	}
	if spec.ID == "" {
		t.Fatal("create assigned no backend id")
	}
	removed, err := m.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
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

	bare := &Manager{DataDir: t.TempDir()}
	defer bare.Close()
	if err := bare.Create(ctx, &sandbox.Info{Name: "dev"}, &sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
	if removed, err := bare.GC(ctx, false); err != nil || len(removed) != 0 {
		t.Errorf("gc without a reclaimer: %q %v", removed, err)
	}
	if err := bare.Remove(ctx, "dev", false); err != nil {
		t.Errorf("remove without a reclaimer: %v", err)
	}
}
