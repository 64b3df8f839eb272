//go:build linux

package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/image"
)

// chainLen is longer than any symlink budget a path resolver should
// follow; the kernel itself stops at 40 per lookup, but a resolver that
// gives up and hands the rest of the path to the kernel lets the kernel
// follow the last link from the host's root.
const chainLen = 70

// imageSymlinkChecks attacks the host side of sandbox set-up with a
// malicious image: /home is a chain of chainLen symlinks whose last link
// points at an absolute host directory. agentkernel prepares mount points
// (the permissive $HOME mount at /home/user) and the working directory
// while it still sees the host's root; if it ever follows the image's
// links out of the new root, directories appear in the host target.
func imageSymlinkChecks(t *testing.T, r *runner) []hostCheck {
	t.Helper()
	f := r.f
	evil := filepath.Join(f.dataDir, "layers", "evil")
	must(t, os.MkdirAll(evil, 0o755))
	idmap := image.DefaultIDMap()
	var checks []hostCheck
	for _, c := range []struct {
		name, profile, workdir, created string
	}{
		{"image symlinks cannot redirect the $HOME mount point to the host", "permissive", "", "user"},
		{"image symlinks cannot redirect the working directory to the host", "moderate", "/home/attack-wd", "attack-wd"},
	} {
		target := filepath.Join(f.tmp, "host", "link-target-"+c.profile)
		must(t, os.MkdirAll(target, 0o755))
		layer := filepath.Join(evil, c.profile)
		must(t, os.MkdirAll(layer, 0o755))
		link := func(name, to string) {
			p := filepath.Join(layer, name)
			must(t, os.Symlink(to, p))
			if !idmap.IsZero() {
				must(t, os.Lchown(p, idmap.HostUID(0), idmap.HostGID(0)))
			}
		}
		link("home", "h0")
		for i := 0; i < chainLen-1; i++ {
			link(fmt.Sprintf("h%d", i), fmt.Sprintf("h%d", i+1))
		}
		link(fmt.Sprintf("h%d", chainLen-1), target)
		if !idmap.IsZero() {
			must(t, os.Lchown(layer, idmap.HostUID(0), idmap.HostGID(0)))
		}

		spec := r.spec(c.profile, "evil-image")
		spec.Args = []string{"/bin/true"}
		spec.Rootfs.Layers = append(append([]string{}, f.layers...), layer)
		if r.other != nil {
			r.other.adjust(r, spec)
		}
		if c.workdir != "" {
			spec.Workdir = c.workdir
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := r.backend.Run(ctx, spec, stdioDiscard())
		cancel()
		ents, _ := os.ReadDir(target)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		ok := len(names) == 0
		detail := fmt.Sprintf("%s: /home -> %d symlinks -> %s; run: exit %d, err %v; host target holds %v",
			c.profile, chainLen, target, res.ExitCode, err, names)
		if !ok {
			if fi, err := os.Stat(filepath.Join(target, c.created)); err == nil {
				detail += fmt.Sprintf(" (%s created on the host, mode %v, owner %s)", c.created, fi.Mode(), owner(fi))
			}
		}
		checks = append(checks, hostCheck{Name: c.name, OK: ok, Detail: detail})
	}
	return checks
}

func owner(fi os.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	return "?"
}
