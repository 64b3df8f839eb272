package native

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestLookupsInRoot: the image's files are found through the root's
// descriptor (openat2, RESOLVE_IN_ROOT) exactly as resolveIn finds them,
// and a symlink never leads out of the root: not by an absolute target,
// not by "..".
func TestLookupsInRoot(t *testing.T) {
	root := t.TempDir()
	host := t.TempDir() // stands for the host: nothing may be read here
	for _, d := range []string{"etc", "home/app", "real", "sub"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(dir, name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(root, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n# comment\napp:x:1000:1001::/home/app:/bin/sh\n")
	write(root, "etc/group", "root:x:0:\nwheel:x:10:app\napp:x:1001:\nstaff:x:50:other,app\n")
	write(host, "passwd", "app:x:0:0::/:/bin/sh\n")
	links := map[string]string{
		"abs":      "/real",
		"up":       "../../../../../../real",
		"escape":   "../../../../../../.." + host, // resolves inside root: missing
		"hostabs":  host,                          // likewise
		"file":     "/etc/passwd",
		"loop":     "loop",
		"magic":    "/proc/self/root",
		"sub/rel":  "../real",
		"sub/deep": "/sub/rel",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := openInRoot(fd, "/etc/passwd", unix.O_RDONLY); err == errNoOpenat2 {
		testenv.Missing(t, "no openat2 here (a kernel before 5.6): resolveIn is the only path")
	}

	for _, spec := range []string{"", "app", "1000", "app:wheel", "root:1001", "42", "nobody"} {
		viaFd, errFd := resolveUser(root, fd, spec)
		viaPath, errPath := resolveUser(root, -1, spec)
		if !reflect.DeepEqual(viaFd, viaPath) || (errFd == nil) != (errPath == nil) {
			t.Errorf("user %q: through the descriptor %+v, %v; by path %+v, %v", spec, viaFd, errFd, viaPath, errPath)
		}
	}
	if u, _ := resolveUser(root, fd, "app"); u.uid != 1000 || u.gid != 1001 || !reflect.DeepEqual(u.groups, []int{1001, 10, 50}) || u.home != "/home/app" {
		t.Errorf("app resolved to %+v", u)
	}
	for _, p := range []string{"/abs", "/up", "/escape", "/hostabs", "/file", "/loop", "/magic", "/sub/rel", "/sub/deep", "/etc", "/missing", "/sub/../../../etc"} {
		want := false
		if rp, err := resolveIn(root, p); err == nil {
			fi, err := os.Stat(root + rp)
			want = err == nil && fi.IsDir()
		}
		if got := isDirIn(root, fd, p); got != want {
			t.Errorf("isDirIn(%s) = %v, want %v", p, got, want)
		}
	}
	if got := readColonFile(root, fd, "/escape/passwd"); got != nil {
		t.Errorf("read the host's file through a symlink: %v", got)
	}
	if got, want := readColonFile(root, fd, "/file"), readColonFile(root, -1, "/file"); len(got) != 2 || !reflect.DeepEqual(got, want) {
		t.Errorf("through a symlink to the image's passwd: %v, by path %v", got, want)
	}
}
