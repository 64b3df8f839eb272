package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSecretFilesInRoot: the image's CA bundle is read as the sandbox
// resolves it, and the CA's mount points are made inside the root:
// links in a hostile image (absolute, climbing, through a directory)
// never lead to the host's files, a FIFO in the bundle's place does not
// hang the read, and nothing is made outside the root.
func TestSecretFilesInRoot(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "root")
	outside := filepath.Join(top, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "etc/ssl/certs"), filepath.Join(root, "etc/pki/tls/certs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hostFile := filepath.Join(outside, "host-secret")
	if err := os.WriteFile(hostFile, []byte("HOST FILE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(hostFile, filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")))
	must(os.Symlink("../../../../outside/host-secret", filepath.Join(root, "etc/pki/tls/certs/ca-bundle.crt")))
	must(unix.Mkfifo(filepath.Join(root, "etc/ssl/cert.pem"), 0o644))
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(err)
	defer unix.Close(rootFd)
	for _, name := range systemBundles {
		if b, err := readInRoot(rootFd, name, maxBundle); err == nil {
			t.Errorf("/%s read as %q", name, b)
		}
	}
	// Inside the root, a link that stays in it is followed there.
	must(os.WriteFile(filepath.Join(root, "etc/real.crt"), []byte("IMAGE CA\n"), 0o644))
	must(os.Remove(filepath.Join(root, "etc/ssl/cert.pem")))
	must(os.Symlink("/etc/real.crt", filepath.Join(root, "etc/ssl/cert.pem")))
	if b, err := readInRoot(rootFd, "etc/ssl/cert.pem", maxBundle); err != nil || string(b) != "IMAGE CA\n" {
		t.Errorf("a link inside the root: %q %v", b, err)
	}

	// /etc a link out of the root: the CA's mount point is made inside.
	must(os.Rename(filepath.Join(root, "etc"), filepath.Join(root, "etc.orig")))
	must(os.Symlink(outside, filepath.Join(root, "etc")))
	// (The link's target does not exist inside the root: refused.)
	if err := secretMountPoint(rootFd, root, "etc/agentkernel/ca.crt"); err == nil {
		t.Error("a mount point was made through a link that leads nowhere inside the root")
	}
	if _, err := os.Lstat(filepath.Join(outside, "agentkernel")); err == nil {
		t.Error("a directory was made outside the root")
	}
	// A climbing link whose target exists inside: made there.
	must(os.Remove(filepath.Join(root, "etc")))
	must(os.MkdirAll(filepath.Join(root, "inner"), 0o755))
	must(os.Symlink("../../../../../inner", filepath.Join(root, "etc")))
	if err := secretMountPoint(rootFd, root, "etc/agentkernel/ca.crt"); err != nil {
		t.Errorf("through a link inside the root: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "inner/agentkernel/ca.crt")); err != nil {
		t.Errorf("the mount point, where the link leads inside the root: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "agentkernel")); err == nil {
		t.Error("a directory was made outside the root")
	}
}
