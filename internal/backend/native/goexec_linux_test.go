package native

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestGoExecStage runs the essentials with the Go exec stage (execMain),
// the exec stage on architectures without the assembled stub.
func TestGoExecStage(t *testing.T) {
	b := New(Options{DataDir: t.TempDir()})
	b.goExecStage = true
	run := func(spec *sandbox.Spec) (sandbox.Result, string, error) {
		var out strings.Builder
		res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: &out, Stderr: io.Discard})
		return res, out.String(), err
	}
	if res, _, err := run(newSpec("sh", "-c", "exit 42")); err != nil || res.ExitCode != 42 {
		t.Errorf("exit: %+v %v", res, err)
	}
	if _, _, err := run(newSpec("no-such-command")); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("not found: %v", err)
	}
	if _, _, err := run(newSpec("/etc/noexec")); !errors.Is(err, sandbox.ErrCannotInvoke) {
		t.Errorf("cannot invoke: %v", err)
	}
	// Landlock: the writable root takes new top-level entries; device
	// nodes get EACCES from Landlock before the capability check's EPERM.
	spec := newSpec("sh", "-c", "grep ^CapBnd /proc/self/status; id -u; touch /newfile 2>/dev/null && echo NEW; mknod /node c 1 3 2>&1 | grep -qi 'permission denied' && echo FENCED; unshare -U true 2>/dev/null && echo UNSHARED; true")
	spec.Security.Capabilities = []string{"CAP_CHOWN", "CAP_KILL"}
	want := "CapBnd:\t0000000000000021\n0\nNEW\n"
	if landlockHandled() != 0 {
		want += "FENCED\n"
	}
	if res, out, err := run(spec); err != nil || res.ExitCode != 0 || out != want {
		t.Errorf("fences: %q %+v %v", out, res, err)
	}
	spec = newSpec("id", "-u")
	spec.User = "app"
	if _, out, _ := run(spec); out != "1000\n" {
		t.Errorf("user: %q", out)
	}
	host := t.TempDir()
	_ = os.Chmod(host, 0o755)
	spec = newSpec("sh", "-c", "echo x > /w/new && stat -c %u /w/new")
	spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountCopyOnWrite, Source: host, Dest: "/w"}}
	if res, out, err := run(spec); err != nil || res.ExitCode != 0 || out != "0\n" {
		t.Errorf("cow: %q %+v %v", out, res, err)
	}
	if _, err := os.Stat(filepath.Join(host, "new")); err == nil {
		t.Error("cow leaked")
	}
}
