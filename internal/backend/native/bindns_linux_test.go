package native

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestWritableBindOwnership: in a writable host directory, whatever the
// sandbox does, files end up owned by the invoking user (the sandbox's
// root) or by ids of the sandbox's own block, never by another host
// user; other users' files show as nobody and cannot be changed. With
// the stub and with the Go fallback that makes the namespace.
func TestWritableBindOwnership(t *testing.T) {
	requireRoot(t)
	for _, how := range []string{"stub", "go", "sudo"} {
		t.Run(how, func(t *testing.T) {
			b := New(Options{DataDir: t.TempDir()})
			if how == "go" {
				b.goExecStage = true
			}
			owner := 0
			if how == "sudo" {
				owner = 4321
				t.Setenv("SUDO_UID", "4321")
				t.Setenv("SUDO_GID", "4322")
			}
			host := t.TempDir()
			if err := os.Chmod(host, 0o777); err != nil {
				t.Fatal(err)
			}
			// The project directory is the invoking user's (sudo: the
			// user who ran sudo).
			if how == "sudo" {
				if err := os.Chown(host, 4321, 4322); err != nil {
					t.Fatal(err)
				}
			}
			// A file of another host user, read-only to others.
			other := filepath.Join(host, "others")
			if err := os.WriteFile(other, []byte("theirs\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(other, 1000, 1000); err != nil {
				t.Fatal(err)
			}
			spec := newSpec("sh", "-c", `
				echo hi > /w/by-root
				echo x > /w/chowned && chown 1001:1001 /w/chowned
				su app -s /bin/sh -c 'echo app > /w/by-app'
				stat -c '%u:%g' /w/others /w/by-root /w/chowned /w/by-app
				echo pwned >> /w/others 2>/dev/null && echo WROTE
				chown 0:0 /w/others 2>/dev/null && echo CHOWNED
				cat /proc/self/uid_map`)
			spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountBind, Source: host, Dest: "/w"}}
			spec.Security.Capabilities = dockerCaps
			o := runWith(t, b, spec)
			if o.err != nil || o.res.ExitCode != 0 {
				t.Fatalf("%v %+v %q %q", o.err, o.res, o.stdout, o.stderr)
			}
			lines := strings.Split(strings.TrimSpace(o.stdout), "\n")
			if len(lines) != 5 {
				t.Fatalf("output %q (stderr %q)", o.stdout, o.stderr)
			}
			// Inside: the sandbox's own view of what it wrote; others'
			// file is nobody's and was not changed.
			if want := "65534:65534\n0:0\n1001:1001\n1000:1000"; strings.Join(lines[:4], "\n") != want {
				t.Errorf("inside: %q, want %q", lines[:4], want)
			}
			base, _ := strconv.Atoi(strings.Fields(lines[4])[1])
			if base < 524288 {
				t.Fatalf("uid_map %q", lines[4])
			}
			wantOwner := map[string][2]int{
				"others": {1000, 1000}, "by-root": {owner, owner}, "chowned": {base + 1001, base + 1001}, "by-app": {base + 1000, base + 1000},
			}
			if how == "sudo" {
				wantOwner["by-root"] = [2]int{4321, 4322}
			}
			for name, want := range wantOwner {
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(host, name), &st); err != nil {
					t.Fatal(err)
				}
				if int(st.Uid) != want[0] || int(st.Gid) != want[1] {
					t.Errorf("host sees %s owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, want[0], want[1])
				}
			}
			if b, _ := os.ReadFile(other); string(b) != "theirs\n" {
				t.Errorf("another user's file changed: %q", b)
			}
		})
	}
}

// runWith runs spec on b, collecting its output.
func runWith(t *testing.T, b *Backend, spec *sandbox.Spec) outcome {
	t.Helper()
	var out, errb strings.Builder
	res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: &out, Stderr: &errb})
	return outcome{res: res, err: err, stdout: out.String(), stderr: errb.String()}
}
