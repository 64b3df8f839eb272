package native

import (
	"os"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestGCIDsVanishedDataDir: a block reserved for a sandbox of a data
// directory that was deleted (by hand, or a test's) is freed by the next
// gc, whichever data directory it runs for; one of a data directory
// that still exists is kept.
func TestGCIDsVanishedDataDir(t *testing.T) {
	requireRoot(t)
	gone, kept := t.TempDir(), t.TempDir()
	alloc := idrange.Default()
	spec := &sandbox.Spec{Name: "box", ID: "id-" + strings.ReplaceAll(t.Name(), "/", "-")}
	goneBase, err := alloc.Reserve(reservation(gone, spec))
	if err != nil {
		t.Fatal(err)
	}
	keptBase, err := alloc.Reserve(reservation(kept, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer alloc.Free(keptBase, reservation(kept, spec))
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	freed, err := GCIDs("", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := alloc.Held(goneBase, reservation(gone, spec)); held {
		t.Errorf("the vanished data directory's block %d is still reserved (freed %v)", goneBase, freed)
	}
	if held, _ := alloc.Held(keptBase, reservation(kept, spec)); !held {
		t.Errorf("an existing data directory's block %d was freed", keptBase)
	}
}
