package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestImageSymlinkChain: an image whose /home is a chain of 70 symlinks
// ending at a host directory must not make the init create the working
// directory or a mount point on the host.
func TestImageSymlinkChain(t *testing.T) {
	target := t.TempDir()
	layer := t.TempDir()
	link := func(name, to string) {
		p := filepath.Join(layer, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			_ = os.Lchown(p, 0, 0)
		}
	}
	link("home", "h0")
	for i := 0; i < 69; i++ {
		link(fmt.Sprintf("h%d", i), fmt.Sprintf("h%d", i+1))
	}
	link("h69", target)
	if os.Geteuid() == 0 {
		_ = os.Lchown(layer, 0, 0)
	}
	for _, spec := range []*sandbox.Spec{newSpec("true")} {
		spec.Rootfs = image.Rootfs{Layers: []string{testImage, layer}}
		spec.Workdir = "/home/wd"
		_ = runSpec(t, spec, nil)
		spec.Workdir = ""
		spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountTmpfs, Dest: "/home/user"}}
		_ = runSpec(t, spec, nil)
	}
	if ents, _ := os.ReadDir(target); len(ents) > 0 {
		t.Fatalf("the host directory behind the image's symlinks got %v", ents)
	}
	// A short chain that stays inside the image works.
	spec := newSpec("pwd")
	spec.Workdir = "/etc/../home/app"
	if o := mustRun(t, spec, 0); o.stdout != "/home/app\n" {
		t.Errorf("pwd %q", o.stdout)
	}
}

// TestInheritedDescriptors: a host directory descriptor agentkernel's
// caller left open (not close-on-exec) never reaches the command.
func TestInheritedDescriptors(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0) // no O_CLOEXEC on purpose
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	o := mustRun(t, newSpec("sh", "-c", "ls /proc/self/fd"), 0)
	if f := strings.Fields(o.stdout); len(f) > 4 { // 0 1 2 and ls's own directory fd
		t.Fatalf("command sees descriptors %v (leaked host dir was fd %d)", f, fd)
	}
}

// TestTmpfsVolumeSized: a tmpfs volume is limited like the writable layer.
func TestTmpfsVolumeSized(t *testing.T) {
	spec := newSpec("sh", "-c", "df -m /scratch | tail -1")
	spec.Resources.DiskMB = 8
	spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountTmpfs, Dest: "/scratch"}}
	o := mustRun(t, spec, 0)
	if f := strings.Fields(o.stdout); len(f) < 2 || f[1] != "8" {
		t.Fatalf("df: %q", o.stdout)
	}
}

// TestImageHostileUserFiles: an image whose /etc/passwd is a FIFO (an
// open for reading would wait for a writer for ever) and whose
// /etc/group is a symlink to /dev/zero (a read that never ends) still
// runs its command (as root, the default), and at once.
func TestImageHostileUserFiles(t *testing.T) {
	layer := t.TempDir()
	etc := filepath.Join(layer, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(etc, "passwd"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(etc, "group")); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		for _, p := range []string{layer, etc, filepath.Join(etc, "passwd"), filepath.Join(etc, "group")} {
			_ = os.Lchown(p, 0, 0)
		}
	}
	spec := newSpec("echo", "ran")
	spec.Rootfs = image.Rootfs{Layers: []string{testImage, layer}}
	done := make(chan outcome, 1)
	go func() { done <- runSpec(t, spec, nil) }()
	select {
	case o := <-done:
		if o.err != nil || o.res.ExitCode != 0 || o.stdout != "ran\n" {
			t.Fatalf("echo: %v, exit %d, %q (stderr %q)", o.err, o.res.ExitCode, o.stdout, o.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run waited on the image's /etc/passwd")
	}
}
