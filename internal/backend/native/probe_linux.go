package native

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// What 'agentkernel doctor' asks of this host, answered by the code runs
// use to decide: a cgroup made and removed as a run makes it, an overlay
// mounted in a user namespace as the init mounts it, the seccomp filter
// compiled and loaded as the exec stage loads it.

// argv0Probe is agentkernel re-executed as a probe child (probeMain).
const argv0Probe = "agentkernel:probe"

// probeTimeout bounds one probe child.
const probeTimeout = 10 * time.Second

// CgroupProbe is what a run would get from cgroups here.
type CgroupProbe struct {
	// Layout is "v2", "hybrid" (v1 controllers, v2 mounted beside them),
	// "v1" or "none".
	Layout string
	// Rootless: the probe ran as a user other than root.
	Rootless bool
	// Dir is where a run's cgroup is made (a v1 controller's parent or
	// the v2 parent), when known.
	Dir string
	// Controllers are the v2 controllers available in Dir
	// (cgroup.controllers), when v2.
	Controllers string
	// Err is nil when a cgroup with memory, pids and CPU limits was made
	// and removed; NoCgroups(Err) when the caller may not make one (the
	// fallback ladder's case); any other error fails runs with limits.
	Err error
}

// NoCgroups reports whether err means limits cannot be had here at all
// (what the fallback ladder decides on), rather than a failure.
func NoCgroups(err error) bool { return errors.Is(err, errNoCgroups) }

// ProbeCgroups makes a cgroup with memory, pids and CPU limits exactly as
// a run does (newCgroup, named for dataDir's backend so that gc knows it)
// and removes it.
func ProbeCgroups(dataDir string) CgroupProbe {
	rootless := os.Geteuid() != 0
	p := CgroupProbe{Layout: CgroupLayout(), Rootless: rootless}
	if p.Layout == "v2" {
		if dir, err := v2Parent(rootless); err == nil {
			p.Dir = dir
		} else if own, perr := cgroups.ParseCgroupFile("/proc/self/cgroup"); perr == nil {
			p.Dir = filepath.Dir(filepath.Join(cgroupRoot, own[""]))
		}
		if b, err := os.ReadFile(filepath.Join(p.Dir, "cgroup.controllers")); err == nil {
			p.Controllers = strings.TrimSpace(string(b))
		}
	} else if own, err := cgroups.ParseCgroupFile("/proc/self/cgroup"); err == nil {
		p.Dir = filepath.Join(v1OwnDir("memory", own["memory"]), cgroupParent)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := "doctor" + hex.EncodeToString(b[:])
	cg, err := newCgroup(cgroupName(id, dataDirTag(dataDir)), sandbox.Resources{MemoryMB: 64, PIDs: 64, CPUPercent: 100}, rootless, false)
	if err == nil {
		err = cg.destroy()
	}
	p.Err = err
	return p
}

// CgroupLayout is how this host mounts cgroups: "v2" (unified, what runs
// use when cgroups.IsCgroup2UnifiedMode says so), "hybrid" (v1
// controllers with v2 mounted beside them), "v1", or "none".
func CgroupLayout() string {
	if cgroups.IsCgroup2UnifiedMode() {
		return "v2"
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "none"
	}
	return cgroupLayoutOf(string(b))
}

// cgroupLayoutOf tells v1, hybrid and none apart from a mountinfo table
// (the unified case is decided by statfs, as runs decide it).
func cgroupLayoutOf(mountinfo string) string {
	v1, v2 := false, false
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		_, after, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		switch strings.SplitN(after, " ", 2)[0] {
		case "cgroup":
			v1 = true
		case "cgroup2":
			v2 = true
		}
	}
	switch {
	case v1 && v2:
		return "hybrid"
	case v1:
		return "v1"
	case v2:
		return "v2"
	}
	return "none"
}

// ProbeUserNamespace starts a child in a new user and mount namespace
// (what every sandbox's init or exec stage needs) and, in it, mounts an
// overlay the way a rootless init does (userxattr); as root the overlay
// is tried in a new mount namespace only, as a root run's init mounts
// it. userns is nil when the namespace was made; overlay when the
// overlay was mounted and written.
func ProbeUserNamespace(ctx context.Context) (userns, overlay error) {
	rootless := os.Geteuid() != 0
	if err := probeChild(ctx, "userns", unix.CLONE_NEWUSER, true); err != nil {
		return err, errors.New("not tried: no user namespace")
	}
	flags := uintptr(unix.CLONE_NEWNS)
	if rootless {
		flags |= unix.CLONE_NEWUSER
	}
	return nil, probeChild(ctx, "overlay", flags, rootless)
}

// sandboxNamespaces are the namespaces every sandbox's init makes
// besides its user namespace (makeNamespaces; a rootless init makes them
// inside its own user namespace).
const sandboxNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS

// ProbeNamespaces starts a child in the mount, PID, network, IPC and UTS
// namespaces a sandbox's init makes, as the init makes them: as root,
// with the caller's own privilege (CAP_SYS_ADMIN, which a container
// usually withholds); rootless, inside a new user namespace.
func ProbeNamespaces(ctx context.Context) error {
	rootless := os.Geteuid() != 0
	flags := uintptr(sandboxNamespaces)
	if rootless {
		flags |= unix.CLONE_NEWUSER
	}
	if err := probeChild(ctx, "namespaces", flags, rootless); err != nil {
		return fmt.Errorf("mount, PID, network, IPC and UTS namespaces: %w", err)
	}
	return nil
}

// What a namespaces probe child says failed after its clone: lo up in
// its network namespace (setupNetwork's), a fresh /proc of its PID
// namespace (mountFreshProc's).
var (
	ErrLoopbackRefused = errors.New("bringing lo up in the new network namespace")
	ErrProcRefused     = errors.New("mounting a /proc of the new PID namespace")
	ErrHostnameRefused = errors.New("setting the host name in the new UTS namespace")
	ErrMknodRefused    = errors.New("making the sandbox's device nodes")
)

// probeChildErrors are the child's failures the parent gives back as
// the errors above, by the prefix the child prints.
var probeChildErrors = []error{ErrLoopbackRefused, ErrProcRefused, ErrHostnameRefused, ErrMknodRefused}

// ErrCloneRefused marks a probe whose child could not be cloned into its
// namespaces at all (the kernel or a container's seccomp profile refused
// clone), as opposed to one that started and then failed.
var ErrCloneRefused = errors.New("creating the namespaces refused")

// ProbeSeccomp compiles the allowlist profile's filter and loads it in a
// child, as the exec stage loads a sandbox's.
func ProbeSeccomp(ctx context.Context) error {
	return probeChild(ctx, "seccomp", 0, os.Geteuid() != 0)
}

// ProbeIDMapped tries an idmapped mount of dir (where image layers live)
// through a fresh user namespace, as a root run's init idmaps each
// layer: a detached clone of dir, never attached anywhere. Rootless runs
// do not idmap (the caller's own files are stacked as they are): the
// answer is then ErrUnsupported-free nil with rootless true.
func ProbeIDMapped(dir string) (rootless bool, err error) {
	if os.Geteuid() != 0 {
		return true, nil
	}
	ns, err := makeUserns("/proc", "0 65534 1\n", "0 65534 1\n", false)
	if err != nil {
		return false, fmt.Errorf("user namespace: %w", err)
	}
	defer unix.Close(ns)
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return false, fmt.Errorf("open_tree %s: %w", dir, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(ns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return false, fmt.Errorf("idmapping %s: %w", dir, err)
	}
	return false, nil
}

// ProbeTUN opens /dev/net/tun as a sandbox's init opens it for network
// egress (without creating a device). A rootless init that cannot open
// it gives the sandbox an HTTP proxy instead.
func ProbeTUN() error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: "/dev/net/tun", Err: err}
	}
	return unix.Close(fd)
}

// probeChild runs this binary as argv0Probe in mode, cloned with flags
// (mapping the caller's own ids to root inside when CLONE_NEWUSER), and
// returns its failure as an error with the child's message.
func probeChild(ctx context.Context, mode string, flags uintptr, rootless bool) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{argv0Probe, mode, strconv.FormatBool(rootless)}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	if flags&unix.CLONE_NEWUSER != 0 {
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		// exec's error names /proc/self/exe; what failed is the clone.
		var errno syscall.Errno
		if errors.As(err, &errno) {
			err = errno
		}
		return fmt.Errorf("%w: %w", ErrCloneRefused, err)
	}
	err := cmd.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("no answer within %s", probeTimeout)
	}
	if err != nil {
		if msg := strings.TrimSpace(out.String()); msg != "" {
			if len(msg) > 300 {
				msg = msg[:300]
			}
			for _, e := range probeChildErrors {
				if rest, ok := strings.CutPrefix(msg, e.Error()+": "); ok {
					return fmt.Errorf("%w: %s", e, rest)
				}
			}
			return errors.New(msg)
		}
		return err
	}
	return nil
}

// probeMain is the probe child: it does what mode asks and exits 0, or
// prints why not and exits 1.
func probeMain() int {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "probe: want MODE ROOTLESS")
		return 1
	}
	rootless := os.Args[2] == "true"
	var err error
	switch os.Args[1] {
	case "userns":
		// Being here is the answer.
	case "namespaces":
		err = probeNamespaces(rootless)
	case "overlay":
		err = probeOverlay(rootless)
	case "seccomp":
		err = probeSeccomp()
	default:
		err = fmt.Errorf("unknown probe %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// probeNamespaces does in the child's fresh namespaces what every
// sandbox's init does first there: lo up (setupNetwork), a /proc of the
// new PID namespace (mountFreshProc), in a private mount tree, and its
// host name (setHostname); as root, a device node (mountDev's). A
// container that withholds CAP_NET_ADMIN or CAP_MKNOD,
// masks parts of /proc (which makes the kernel refuse a fresh proc in a
// user namespace), or whose seccomp profile refuses sethostname, fails
// here as runs would.
func probeNamespaces(rootless bool) error {
	if err := prestart.LoopbackUp(); err != nil {
		return fmt.Errorf("%w: %w", ErrLoopbackRefused, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := (&initState{}).mountFreshProc(); err != nil {
		return fmt.Errorf("%w: %w", ErrProcRefused, err)
	}
	if err := setHostname("agentkernel-probe"); err != nil {
		return fmt.Errorf("%w: %w", ErrHostnameRefused, err)
	}
	if rootless {
		return nil // a rootless /dev binds the caller's device nodes
	}
	// As root, mountDev's device nodes, on a tmpfs of the child's own.
	dir := "/tmp"
	if _, err := os.Stat(dir); err != nil {
		dir = "/dev"
	}
	if err := mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=16k,mode=0700"); err != nil {
		return fmt.Errorf("%w: %w", ErrMknodRefused, err)
	}
	d := devices[0]
	if err := unix.Mknod(dir+"/"+d.name, unix.S_IFCHR|0o600, int(unix.Mkdev(d.major, d.minor))); err != nil {
		return fmt.Errorf("%w: mknod /dev/%s: %w", ErrMknodRefused, d.name, err)
	}
	return nil
}

// probeOverlay mounts a tmpfs with an overlay on it in the child's own
// mount namespace (mountOverlay, the init's code) and writes through it.
func probeOverlay(rootless bool) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	dir := "/tmp"
	if _, err := os.Stat(dir); err != nil {
		dir = "/dev"
	}
	if err := mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0700"); err != nil {
		return err
	}
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "lower", "f"), []byte("x"), 0o600); err != nil {
		return err
	}
	s := &initState{cfg: &initConfig{Rootless: rootless}}
	if err := s.mountOverlay([]string{filepath.Join(dir, "lower")}, filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged"), 0); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "merged", "f"), []byte("y"), 0o600); err != nil {
		return fmt.Errorf("writing through the overlay: %w", err)
	}
	return nil
}

// probeSeccomp loads the allowlist profile's filter, as the exec stage
// loads a sandbox's (no_new_privs first).
func probeSeccomp() error {
	filter, err := compileSeccomp("allowlist", nil, false)
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return loadSeccomp(filter)
}
