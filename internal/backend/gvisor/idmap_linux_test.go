package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestPersistentOwnedBind: in a persistent sandbox's writable volume a
// command run beside the init (runsc exec) writes as native's would: a
// new file is the invoking user's, a chown to 1001 lands in a block of
// sandbox ids, and a set-user-ID mode is refused.
func TestPersistentOwnedBind(t *testing.T) {
	needRunsc(t)
	if idleInit() == nil {
		t.Skip("persistent gvisor sandboxes exist on amd64 only")
	}
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer)
	spec.ID = "owned-test"
	proj := t.TempDir()
	spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountBind, Source: proj, Dest: "/workspace"}}
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := b.Boot(ctx, spec, filepath.Join(dataDir, "sandboxes", "box"), log)
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	defer func() { in.Kill(); in.Close() }()
	out, ws, err := execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c",
		"echo x > /workspace/new; echo y > /workspace/given; chown 1001:1001 /workspace/given; echo z > /workspace/suid; chmod 4755 /workspace/suid; echo status $?"}})
	if err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("exec: %q %v %v", out, ws, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(proj, "new"), &st); err != nil || int(st.Uid) != os.Getuid() {
		t.Errorf("a new file is host %d (%v), want the invoking user %d", st.Uid, err, os.Getuid())
	}
	if err := unix.Lstat(filepath.Join(proj, "given"), &st); err != nil || st.Uid < idrange.First+1001 || st.Uid == 1001 {
		t.Errorf("a chown to 1001 gave host %d (%v), want 1001 of a sandbox block", st.Uid, err)
	}
	if err := unix.Lstat(filepath.Join(proj, "suid"), &st); err != nil || st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		t.Errorf("the host file has mode %o (%v): a set-id mode got through (exec said %q)", st.Mode&0o7777, err, out)
	}
}
