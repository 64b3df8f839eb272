//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
)

// TestPersistentIDsKept: a persistent sandbox of the gvisor, docker and
// podman backends whose project is bound writable (permissive) keeps
// one block of host ids from its first start to its removal, as
// native's does: a file chowned to 1000 inside is host id base+1000,
// and after a stop and a start it is still 1000's inside (a fresh block
// at each start showed it as nobody); removing the sandbox frees the
// block.
func TestPersistentIDsKept(t *testing.T) {
	t.Run("gvisor", func(t *testing.T) {
		a, ref := withGVisor(t)
		checkPersistentIDs(t, a, ref, "gvisor")
	})
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			a, ref := withEngine(t, e, startEngine(t, e))
			checkPersistentIDs(t, a, ref, e.name)
		})
	}
}

func checkPersistentIDs(t *testing.T, a *ak, ref, backend string) {
	const name = "ids"
	a.must("run", "-B", backend, "-p", "permissive", "--image", ref, "--name", name, "-d")
	removed := false
	t.Cleanup(func() {
		if !removed {
			a.run("sandbox", "rm", "-f", name)
		}
	})
	owners := func() string {
		t.Helper()
		return strings.TrimSpace(a.must("exec", name, "--", "stat", "-c", "%u:%g", "/workspace/given").stdout)
	}
	a.must("exec", name, "--", "sh", "-c", "echo x > /workspace/given && chown 1000:1000 /workspace/given")
	if got := owners(); got != "1000:1000" {
		t.Fatalf("after chown 1000:1000 inside: %s", got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(a.dir, "given"), &st); err != nil {
		t.Fatal(err)
	}
	hostUID, hostGID := st.Uid, st.Gid
	for i := 0; i < 2; i++ {
		a.must("sandbox", "stop", name)
		// A run meanwhile holds the block a run would take next (the
		// one a block leased at each start would most likely be
		// again, on a quiet machine).
		held, err := idrange.Default().Acquire()
		if err != nil {
			t.Fatal(err)
		}
		a.must("sandbox", "start", name)
		got := owners()
		held.Release()
		if got != "1000:1000" {
			t.Errorf("after stop and start %d: the file is %s inside, want 1000:1000", i+1, got)
		}
	}
	recorded, err := os.ReadFile(filepath.Join(a.dataDir, "sandboxes", name, "idrange"))
	if err != nil {
		t.Fatalf("the sandbox's block is not recorded: %v", err)
	}
	base, err := strconv.ParseUint(strings.TrimSpace(string(recorded)), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(hostUID) != base+1000 || uint64(hostGID) != base+1000 {
		t.Errorf("on the host the file is %d:%d, want the sandbox's block's %d", hostUID, hostGID, base+1000)
	}
	reservation := filepath.Join(idrange.DefaultDir, strconv.FormatUint(base, 10))
	if b, err := os.ReadFile(reservation); err != nil || !strings.Contains(string(b), `"name":"`+name+`"`) {
		t.Errorf("block %d is not reserved for the sandbox: %q %v", base, b, err)
	}
	a.must("sandbox", "rm", "-f", name)
	removed = true
	if b, err := os.ReadFile(reservation); err == nil && len(b) > 0 {
		t.Errorf("block %d is still reserved after the sandbox's removal: %q", base, b)
	}
}
