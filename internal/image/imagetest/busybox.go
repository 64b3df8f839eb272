package imagetest

import (
	"archive/tar"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// BusyboxPath is where Debian's busybox-static puts its binary.
const BusyboxPath = "/bin/busybox"

// fallbackApplets are used when `busybox --list` cannot run.
func fallbackApplets() []string {
	return []string{
		"sh", "true", "false", "echo", "cat", "ls", "id", "sleep", "env", "pwd", "mkdir",
		"touch", "rm", "dd", "head", "yes", "wc", "grep", "ps", "mount", "umount",
		"hostname", "kill", "cp", "mv", "ln", "chmod", "chown", "stat", "test", "[",
		"uname", "whoami", "seq", "printf", "tail", "sed", "awk", "find", "xargs",
	}
}

// BusyboxFiles are the entries of the busybox image's single layer: the
// static binary, applet symlinks in /bin, /etc/passwd and /etc/group with
// root, app (1000) and nobody, and the usual top-level directories (/tmp
// 1777). When busybox-static is not installed it ends the test through
// testenv.Missing: a skip, or a failure under AGENTKERNEL_TEST_STRICT=1.
func BusyboxFiles(t testing.TB) []File {
	t.Helper()
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		testenv.Missing(t, "busybox-static not installed (%v): apt-get install -y busybox-static", err)
	}
	applets := fallbackApplets()
	if out, err := exec.Command(BusyboxPath, "--list").Output(); err == nil {
		applets = strings.Fields(string(out))
	}
	sort.Strings(applets)
	files := []File{
		Dir("bin"), Dir("sbin"), Dir("usr"), Dir("usr/bin"), Dir("usr/sbin"),
		Dir("etc"), Dir("dev"), Dir("proc"), Dir("sys"), Dir("run"), Dir("var"),
		{Name: "root", Type: tar.TypeDir, Mode: 0o700},
		{Name: "tmp", Type: tar.TypeDir, Mode: 0o1777},
		Dir("home"),
		{Name: "home/app", Type: tar.TypeDir, Mode: 0o755, Uid: 1000, Gid: 1000},
		{Name: "bin/busybox", Body: string(bin), Mode: 0o755},
		Reg("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
		Reg("etc/group", "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n"),
		Reg("etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n"),
		Symlink("usr/bin/env", "/bin/busybox"),
	}
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		files = append(files, Symlink("bin/"+a, "busybox"))
	}
	return files
}

// BusyboxConfig is the busybox image's runtime config.
func BusyboxConfig() v1.Config {
	return v1.Config{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd:        []string{"/bin/sh"},
		WorkingDir: "/",
	}
}

// BusyboxImage is a one-layer busybox userland image for the host
// platform.
func BusyboxImage(t testing.TB) v1.Image {
	t.Helper()
	return Image(t, BusyboxConfig(), Layer(t, BusyboxFiles(t)...))
}

// PushBusybox pushes BusyboxImage to registryHost/repoTag (anonymously)
// and returns the reference.
func PushBusybox(t testing.TB, registryHost, repoTag string) string {
	t.Helper()
	ref, err := name.ParseReference(registryHost + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, BusyboxImage(t)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.String()
}
