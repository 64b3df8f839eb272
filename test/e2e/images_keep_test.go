//go:build linux

package e2e

import (
	"strings"
	"testing"
)

// TestImagesPruneKeepsStackedLayers: removing the image of a running
// sandbox, a stopped one and a snapshot, then pruning, keeps every layer
// they stack and says who keeps it: the three start and read the image's
// files and the snapshot restores; once they are gone the next prune
// deletes the layers.
func TestImagesPruneKeepsStackedLayers(t *testing.T) {
	a, ref := newSandbox(t, "keeprun")
	a.must("sandbox", "create", "keepstop", "--image", ref)
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "keepstop") })
	a.sh("keeprun", "echo mine > /root/mine")
	a.must("snapshot", "take", "keeprun", "--name", "keepsnap")
	t.Cleanup(func() { a.run("snapshot", "delete", "keepsnap") })

	if r := a.must("images", "rm", ref); !strings.Contains(r.stdout, "Deleted: sha256:") {
		t.Fatalf("images rm: %v", r)
	}
	r := a.must("images", "prune")
	if !strings.Contains(r.stdout, "Removed 0 layers") || !strings.Contains(r.stdout, "still used by sandbox keeprun, sandbox keepstop, snapshot keepsnap") {
		t.Fatalf("prune of a stacked image's layers: %v", r)
	}

	a.must("sandbox", "restart", "keeprun")
	a.must("sandbox", "start", "keepstop")
	a.must("snapshot", "restore", "keepsnap", "--as", "keeprest")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "keeprest") })
	a.must("sandbox", "start", "keeprest")
	for name, want := range map[string]string{"keeprun": "registry\nmine\n", "keepstop": "registry\n", "keeprest": "registry\nmine\n"} {
		if got := a.sh(name, "cat /etc/agentkernel-test /root/mine 2>/dev/null; true"); got != want {
			t.Errorf("%s after images rm and prune: %q, want %q", name, got, want)
		}
	}

	for _, n := range []string{"keeprun", "keepstop", "keeprest"} {
		a.must("sandbox", "rm", "--force", n)
	}
	a.must("snapshot", "delete", "keepsnap")
	r = a.must("images", "prune")
	if strings.Contains(r.stdout, "Removed 0 layers") || strings.Contains(r.stdout, "Kept") {
		t.Errorf("prune once nothing stacks the layers: %v", r)
	}
}
