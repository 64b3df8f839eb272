package native

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// hostImageExtraPath are directories a host-image sandbox's PATH gains
// when the host has them (toolchains installed outside the usual bins).
var hostImageExtraPath = []string{"/usr/local/go/bin"}

// hostImagePath is the PATH of a host-image sandbox: the entries of the
// host's PATH (hostPATH) that the host image shows (under one of its
// directories, and there as a directory), then the usual directories and
// hostImageExtraPath where they exist. Entries outside the view ($HOME's
// bins, /opt) are left out: nothing would be found there.
func hostImagePath(hostPATH string) string {
	var out []string
	seen := map[string]bool{}
	add := func(d string) {
		if d == "" || !filepath.IsAbs(d) || filepath.Clean(d) != d || seen[d] || !inHostImage(d) {
			return
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return
		}
		seen[d] = true
		out = append(out, d)
	}
	for _, d := range strings.Split(hostPATH, ":") {
		add(d)
	}
	for _, d := range strings.Split("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", ":") {
		add(d)
	}
	for _, d := range hostImageExtraPath {
		add(d)
	}
	if len(out) == 0 {
		return "/usr/bin:/bin"
	}
	return strings.Join(out, ":")
}

// inHostImage reports whether the clean absolute path d lies in one of
// the directories the host image binds.
func inHostImage(d string) bool {
	for _, h := range hostImageDirs {
		if d == h || strings.HasPrefix(d, h+"/") {
			return true
		}
	}
	return false
}

// hostImageEnv is the image environment of spec's root filesystem, with
// the host image's PATH made from the host's (hostImagePath).
func hostImageEnv(env []string, host bool) []string {
	if !host {
		return env
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return append(out, "PATH="+hostImagePath(os.Getenv("PATH")))
}

// makeHostHome creates the user's home directory in a host-image
// sandbox, whose root is an empty tmpfs around the host's read-only
// directories: tools that write under $HOME (go, pip, npm, cargo) need
// it. It belongs to the user. A home that cannot be made (under one of
// the read-only host directories) stays missing, as it was.
func (s *initState) makeHostHome(rootFd int, u user) {
	if u.home == "" || u.home == "/" || !filepath.IsAbs(u.home) {
		return
	}
	if fd, err := openInRoot(rootFd, u.home, unix.O_PATH); err == nil {
		unix.Close(fd)
		return
	}
	h, err := s.inRoot(u.home)
	if err != nil {
		return
	}
	if _, err := os.Lstat(h); err == nil {
		return
	}
	uid, gid := s.cfg.RootUID+u.uid, s.cfg.RootGID+u.gid
	if s.cfg.Rootless && !s.cfg.SubIDs && u.uid != 0 {
		uid, gid = 0, 0
	}
	if err := mkdirAllOwned(h, uid, gid); err == nil {
		_ = os.Chmod(h, 0o700)
	}
}
