package native

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// freezeTimeout bounds how long Freeze waits for the kernel to report
// every process frozen (a process in an uninterruptible sleep is frozen
// once it leaves it).
const freezeTimeout = 10 * time.Second

var _ sandbox.Freezer = (*Backend)(nil)

// Freeze freezes every process of the persistent sandbox whose id is id
// (sandbox.Freezer) with the cgroup freezer: cgroup.freeze of its own
// cgroup on v2; on v1, where sandboxes join no freezer hierarchy, a
// freezer cgroup made for the occasion, into which its processes are
// moved (and back out of by thaw).
func (b *Backend) Freeze(id, _ string) (func() error, error) {
	dirs := sandboxCgroups(id, b.cgOwner)
	if len(dirs) == 0 {
		return nil, errors.New("the sandbox has no cgroup to freeze it by (rootless without delegation?)")
	}
	if cgroups.IsCgroup2UnifiedMode() {
		return freezeV2(dirs[0])
	}
	return freezeV1(filepath.Base(dirs[0]), dirs)
}

func freezeV2(dir string) (func() error, error) {
	file := filepath.Join(dir, "cgroup.freeze")
	thaw := func() error { return os.WriteFile(file, []byte("0"), 0) }
	if err := os.WriteFile(file, []byte("1"), 0); err != nil {
		return nil, err
	}
	err := waitFor(func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l == "frozen 1" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		_ = thaw()
		return nil, err
	}
	return thaw, nil
}

// freezeV1 moves the processes of the cgroups dirs into a freezer cgroup
// of its own (called name) and freezes it. A process forked while the
// others were moved is found by the next pass: one moved into a frozen
// cgroup is frozen by the kernel.
func freezeV1(name string, dirs []string) (func() error, error) {
	root := filepath.Join(cgroupRoot, "freezer")
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		return nil, errors.New("no cgroup freezer hierarchy is mounted")
	}
	fz := filepath.Join(root, cgroupParent, name)
	if err := os.MkdirAll(fz, 0o755); err != nil {
		return nil, fmt.Errorf("creating a freezer cgroup: %w", err)
	}
	home := root // where the processes go back to
	thaw := func() error { return thawV1(fz, home) }
	first := true
	for pass := 0; pass < 100; pass++ {
		in := map[int]bool{}
		for _, pid := range readProcs(fz) {
			in[pid] = true
		}
		moved := 0
		for _, d := range dirs {
			for _, pid := range readProcs(d) {
				if in[pid] {
					continue
				}
				if first {
					if h := freezerCgroupOf(pid); h != "" {
						home = v1OwnDir("freezer", h)
					}
					first = false
				}
				err := os.WriteFile(filepath.Join(fz, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
				if err != nil && !errors.Is(err, unix.ESRCH) {
					_ = thaw()
					return nil, fmt.Errorf("moving process %d into the freezer cgroup: %w", pid, err)
				}
				in[pid] = true
				moved++
			}
		}
		if pass > 0 && moved == 0 {
			return thaw, nil
		}
		if err := os.WriteFile(filepath.Join(fz, "freezer.state"), []byte("FROZEN"), 0); err != nil {
			_ = thaw()
			return nil, err
		}
		err := waitFor(func() (bool, error) {
			b, err := os.ReadFile(filepath.Join(fz, "freezer.state"))
			return string(bytes.TrimSpace(b)) == "FROZEN", err
		})
		if err != nil {
			_ = thaw()
			return nil, err
		}
	}
	_ = thaw()
	return nil, errors.New("the sandbox's processes kept forking while being frozen")
}

// thawV1 thaws the freezer cgroup fz and moves its processes to home.
func thawV1(fz, home string) error {
	if err := os.WriteFile(filepath.Join(fz, "freezer.state"), []byte("THAWED"), 0); err != nil {
		return err
	}
	// The processes go back where they were (those forked meanwhile
	// too), and the cgroup goes: what is left of it (an exiting process
	// still counted) is empty and reused by the next freeze of the
	// sandbox.
	for try := 0; try < 100; try++ {
		for _, pid := range readProcs(fz) {
			_ = os.WriteFile(filepath.Join(home, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
		if unix.Rmdir(fz) == nil || len(readProcs(fz)) == 0 && try > 10 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// Thaw thaws the sandbox whose id is id where a Freeze was left in place
// because its caller died before it could thaw (sandbox.Freezer): its
// v2 cgroup, or the v1 freezer cgroup made for it, whose processes go
// back to the freezer hierarchy's root. Nothing frozen: nothing done.
func (b *Backend) Thaw(id, _ string) error {
	if cgroups.IsCgroup2UnifiedMode() {
		var errs []error
		for _, d := range sandboxCgroups(id, b.cgOwner) {
			err := os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	root := filepath.Join(cgroupRoot, "freezer")
	var errs []error
	for _, n := range []string{cgroupName(id, b.cgOwner), cgroupName(id, "")} {
		fz := filepath.Join(root, cgroupParent, n)
		if _, err := os.Stat(fz); err != nil {
			continue
		}
		if err := thawV1(fz, root); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// freezerCgroupOf is pid's cgroup in the v1 freezer hierarchy ("" when
// it cannot be read).
func freezerCgroupOf(pid int) string {
	m, err := cgroups.ParseCgroupFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	return m["freezer"]
}

func readProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func waitFor(done func() (bool, error)) error {
	deadline := time.Now().Add(freezeTimeout)
	for d := 100 * time.Microsecond; ; d = min(2*d, 10*time.Millisecond) {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the sandbox's processes did not freeze in time")
		}
		time.Sleep(d)
	}
}
