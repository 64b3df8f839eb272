package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
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

// secretFileScript prints what a command sees of its secret files, and
// whether the value ($1$2, given in two halves so that no command line
// carries it) is anywhere else it can look: every process's environment
// and the files of the sandbox outside the secrets' directory. A
// control token written to /tmp is found the same way, so the search can
// fail.
const secretFileScript = `
d=/run/agentkernel/secrets
echo "path=$AGENTKERNEL_SECRETS_PATH"
echo "FKEY=$(cat $d/FKEY)"
echo "OTHER=$(cat $d/OTHER)"
echo "owner $(busybox stat -c '%a %u %g' $d/FKEY) me $(busybox id -u) $(busybox id -g)"
echo "dir $(busybox stat -c '%a %u' $d)"
(echo x >> $d/FKEY) 2>/dev/null && echo "appended" || echo "append refused"
(echo x > $d/NEW) 2>/dev/null && echo "created" || echo "create refused"
(busybox rm -f $d/FKEY && test ! -e $d/FKEY) 2>/dev/null && echo "removed" || echo "remove refused"
(busybox ln -s /etc/passwd $d/LINK) 2>/dev/null && echo "linked" || echo "link refused"
(busybox chmod 0644 $d/FKEY) 2>/dev/null && echo "chmodded" || echo "chmod refused"
echo "ls $(busybox ls -A $d | busybox tr '\n' ' ')"
control="ctl""-token-77"
echo "$control" > /tmp/control
for needle in "$control" "$1$2"; do
	hits=$( (for f in /proc/[0-9]*/environ; do busybox tr '\0' '\n' < "$f"; done 2>/dev/null
		busybox find / -path /proc -prune -o -path /sys -prune -o -path /dev -prune -o -path $d -prune -o -type f -print 2>/dev/null | busybox xargs busybox grep -shF -- "$needle" 2>/dev/null) | busybox grep -cF -- "$needle")
	echo "needle ${#needle} hits $hits"
done
`

// TestSecretFilesRun: --secret-file under runsc. Each file holds its
// value at /run/agentkernel/secrets/KEY, mode 0400, owned by the
// command's user (root, and uid 1000), in a directory of that user's
// that the command cannot write, extend, unlink from or link into;
// AGENTKERNEL_SECRETS_PATH names it; the value is in no process's
// environment and no other file of the sandbox, in no file left on the
// host's disk (the run's directory while it runs, the data directory
// after), and the run leaves nothing behind.
func TestSecretFilesRun(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	const value = "gv-file-secret-4242"
	for _, user := range []struct{ spec, id string }{{"", "0"}, {"1000:1000", "1000"}} {
		spec := testSpec(layer, "sh", "-c", secretFileScript, "sh", value[:7], value[7:])
		spec.User = user.spec
		spec.Secrets = &sandbox.Secrets{Files: []sandbox.SecretFile{{Key: "FKEY", Value: []byte(value)}, {Key: "OTHER", Value: []byte("other\nvalue")}}}
		var out, errOut bytes.Buffer
		// While it runs: no file of the data directory holds the value.
		stop := make(chan struct{})
		scanned := make(chan []string, 1)
		go func() {
			var found []string
			for {
				found = append(found, filesHolding(dataDir, value)...)
				select {
				case <-stop:
					scanned <- found
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: &out, Stderr: &errOut})
		close(stop)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("user %q: %+v %v\n%s\n%s", user.spec, res, err, out.String(), errOut.String())
		}
		t.Logf("inside, user %q:\n%s", user.spec, out.String())
		for _, want := range []string{
			"path=/run/agentkernel/secrets\n",
			"FKEY=" + value + "\n",
			"OTHER=other\nvalue\n",
			fmt.Sprintf("owner 400 %s %s me %s %s\n", user.id, user.id, user.id, user.id),
			fmt.Sprintf("dir 500 %s\n", user.id),
			"append refused\n", "create refused\n", "remove refused\n", "link refused\n", "chmod refused\n",
			"ls FKEY OTHER \n",
			fmt.Sprintf("needle %d hits 1\n", len("ctl-token-77")),
			fmt.Sprintf("needle %d hits 0\n", len(value)),
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("user %q: no %q inside:\n%s", user.spec, want, out.String())
			}
		}
		if found := <-scanned; len(found) > 0 {
			t.Errorf("files on the host's disk held the value while the run ran: %v", found)
		}
	}
	if found := filesHolding(dataDir, value); len(found) > 0 {
		t.Errorf("files of the data directory hold the value: %v", found)
	}
	if left := leftovers(dataDir); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
	// A name that is a path is refused before anything runs.
	spec := testSpec(layer, "true")
	spec.Secrets = &sandbox.Secrets{Files: []sandbox.SecretFile{{Key: "../x", Value: []byte(value)}}}
	if _, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard}); err == nil || !strings.Contains(err.Error(), "not a secret's name") {
		t.Errorf("a secret file named ../x: %v", err)
	}
	// A persistent sandbox takes none (as native's).
	spec = testSpec(layer)
	spec.ID = "files-persist"
	spec.Secrets = &sandbox.Secrets{Files: []sandbox.SecretFile{{Key: "FKEY", Value: []byte(value)}}}
	if _, err := b.Boot(context.Background(), spec, filepath.Join(dataDir, "sandboxes", "p"), nil); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "--secret-file is not supported for persistent sandboxes") {
		t.Errorf("Boot with secret files: %v", err)
	}
}

// filesHolding lists the regular files under dir that hold value.
func filesHolding(dir, value string) []string {
	var found []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(value)) {
				found = append(found, p)
			}
		}
		return nil
	})
	return found
}

// TestSecretFilesHostileImage: an image whose links would take the
// secret files' mount point out of its root: /run (or the directory
// itself) a link to a host directory, absolute or climbing. The mount
// point is made inside the root or not at all (the run is refused,
// saying so); nothing is made on the host outside it, and the files,
// where the run goes on, are where the link leads inside the root.
func TestSecretFilesHostileImage(t *testing.T) {
	needRunsc(t)
	base := busyboxLayer(t)
	outside := t.TempDir()
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	const value = "gv-hostile-secret-77"
	climb := strings.Repeat("../", 12)
	for _, c := range []struct {
		name   string
		links  map[string]string // in the top layer: name → target
		dirs   []string
		refuse bool
		at     string // where the files are inside, beside /run/agentkernel/secrets
	}{
		{name: "run absolute to the host", links: map[string]string{"run": outside}, refuse: true},
		{name: "run climbing to the host", links: map[string]string{"run": climb + strings.TrimPrefix(outside, "/")}, refuse: true},
		{name: "secrets absolute to the host", dirs: []string{"run/agentkernel"}, links: map[string]string{"run/agentkernel/secrets": outside}, refuse: true},
		{name: "run climbing inside", dirs: []string{"inner"}, links: map[string]string{"run": climb + "inner"}, at: "/inner/agentkernel/secrets"},
		{name: "agentkernel absolute inside", dirs: []string{"run", "inner"}, links: map[string]string{"run/agentkernel": "/inner"}, at: "/inner/secrets"},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := t.TempDir()
			for _, d := range c.dirs {
				if err := os.MkdirAll(filepath.Join(top, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, target := range c.links {
				if err := os.Symlink(target, filepath.Join(top, name)); err != nil {
					t.Fatal(err)
				}
			}
			spec := testSpec(base, "sh", "-c", `cat /run/agentkernel/secrets/FKEY; echo; cat "$1/FKEY"; echo`, "sh", c.at)
			spec.Rootfs.Layers = []string{base, top}
			spec.Secrets = &sandbox.Secrets{Files: []sandbox.SecretFile{{Key: "FKEY", Value: []byte(value)}}}
			var out, errOut bytes.Buffer
			res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: &out, Stderr: &errOut})
			switch {
			case c.refuse && (err == nil || !strings.Contains(err.Error(), "secret files")):
				t.Errorf("want the run refused (secret files), got %+v %v %q", res, err, out.String())
			case !c.refuse && (err != nil || res.ExitCode != 0 || out.String() != value+"\n"+value+"\n"):
				t.Errorf("want the value at both paths: %+v %v %q %q", res, err, out.String(), errOut.String())
			}
			if ents, _ := os.ReadDir(outside); len(ents) > 0 {
				t.Errorf("made outside the root: %v", ents)
			}
			if found := filesHolding(dataDir, value); len(found) > 0 {
				t.Errorf("files of the data directory hold the value: %v", found)
			}
		})
	}
	if left := leftovers(dataDir); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
}
