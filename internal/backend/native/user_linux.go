package native

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// prepareProcess resolves the command's user against the sandbox's own
// /etc/passwd and /etc/group, fills HOME, creates the working directory
// and lists the Landlock-writable paths.
func (s *initState) prepareProcess() error {
	e := &s.cfg.Exec
	u, err := resolveUser(s.root, e.User)
	if err != nil {
		return err
	}
	e.UID, e.GID, e.Groups = u.uid, u.gid, u.groups
	if !hasEnv(e.Env, "HOME") {
		e.Env = append(e.Env, "HOME="+u.home)
		s.homeAdded = true
	}
	wd, err := s.inRoot(e.Workdir)
	if err != nil {
		return fmt.Errorf("workdir %s: %w", e.Workdir, err)
	}
	if _, err := os.Stat(wd); err != nil {
		uid, gid := s.cfg.RootUID+u.uid, s.cfg.RootGID+u.gid
		if s.cfg.Rootless && u.uid != 0 {
			uid, gid = 0, 0
		}
		if err := mkdirAllOwned(wd, uid, gid); err != nil {
			return fmt.Errorf("workdir %s: %w", e.Workdir, err)
		}
	}
	if e.Landlock {
		for _, m := range s.cfg.Mounts {
			if !m.ReadOnly {
				e.LandlockRW = append(e.LandlockRW, m.Dest)
			}
		}
		if !s.cfg.ReadOnlyRoot {
			ents, err := os.ReadDir(s.root)
			if err != nil {
				return err
			}
			for _, ent := range ents {
				switch ent.Name() {
				case "proc", "sys", "dev":
					continue
				}
				// Directories only (following symlinks): Landlock's
				// directory rights do not apply to files. The entry's type
				// says so but for symlinks.
				if ent.IsDir() {
					e.LandlockDirs = append(e.LandlockDirs, "/"+ent.Name())
				} else if ent.Type()&os.ModeSymlink == 0 {
					continue
				} else if p, err := s.inRoot("/" + ent.Name()); err != nil {
					continue
				} else if fi, err := os.Stat(p); err == nil && fi.IsDir() {
					e.LandlockDirs = append(e.LandlockDirs, "/"+ent.Name())
				}
			}
		}
	}
	return nil
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// mkdirAllOwned creates dir and its missing parents, giving the new
// directories to uid:gid.
func mkdirAllOwned(dir string, uid, gid int) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == "/" {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range missing {
		if err := os.Lchown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// user is a resolved process identity.
type user struct {
	uid, gid int
	groups   []int
	home     string
}

// resolveUser interprets "", "name", "uid", "name:group" or "uid:gid"
// against root/etc/passwd and root/etc/group, like docker does.
func resolveUser(root, spec string) (user, error) {
	u := user{home: "/"}
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" {
		name = "0"
	}
	passwd := readColonFile(root, "/etc/passwd")
	found := false
	uname := ""
	for _, f := range passwd {
		if len(f) < 6 {
			continue
		}
		if f[0] == name || f[2] == name {
			u.uid, _ = strconv.Atoi(f[2])
			u.gid, _ = strconv.Atoi(f[3])
			u.home = f[5]
			uname, found = f[0], true
			break
		}
	}
	if !found {
		n, err := strconv.Atoi(name)
		if err != nil || n < 0 {
			return u, fmt.Errorf("user %q not found in the image's /etc/passwd", name)
		}
		u.uid, u.gid = n, 0
	}
	groups := readColonFile(root, "/etc/group")
	if hasGroup {
		gfound := false
		for _, f := range groups {
			if len(f) >= 3 && (f[0] == group || f[2] == group) {
				u.gid, _ = strconv.Atoi(f[2])
				gfound = true
				break
			}
		}
		if !gfound {
			g, err := strconv.Atoi(group)
			if err != nil || g < 0 {
				return u, fmt.Errorf("group %q not found in the image's /etc/group", group)
			}
			u.gid = g
		}
	}
	u.groups = []int{u.gid}
	if uname != "" && !hasGroup {
		for _, f := range groups {
			if len(f) < 4 {
				continue
			}
			for _, m := range strings.Split(f[3], ",") {
				if m == uname {
					if g, err := strconv.Atoi(f[2]); err == nil && g != u.gid {
						u.groups = append(u.groups, g)
					}
				}
			}
		}
	}
	return u, nil
}

// readColonFile reads p of the image at root; a missing or unresolvable
// file reads as empty.
func readColonFile(root, p string) [][]string {
	r, err := resolveIn(root, p)
	if err != nil {
		return nil
	}
	f, err := os.Open(root + r)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}
