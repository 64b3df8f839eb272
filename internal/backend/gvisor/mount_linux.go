package gvisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// maxMountData is the longest option string mount(2) takes (a page,
// less room for the rest).
const maxMountData = 4000

// start builds the bundle and starts `runsc run` with stdio. It runs on
// a locked thread that it moves into a mount namespace of its own, where
// the bundle's mounts are made: runsc inherits it.
func (r *run) start(stdio sandbox.Stdio, errLog *os.File, con *console) (*exec.Cmd, error) {
	if err := r.prepare(con); err != nil {
		return nil, err
	}
	r.trace.stage("bundle written")
	if r.tun != nil {
		if err := r.startNetwork(); err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		r.trace.stage("network helper started")
	}
	cmd := r.runCmd(r.state(), r.id, con)
	if con != nil {
		// The command's stdio is the terminal; runsc's own errors still
		// reach stderr.
		cmd.Stderr = writerOf(stdio.Stderr)
	} else {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = readerOf(stdio.Stdin), writerOf(stdio.Stdout), writerOf(stdio.Stderr)
		if sameRegularFile(stdio.Stdout, stdio.Stderr) {
			// One pipe for both (2>&1 into a file): their order is kept.
			cmd.Stderr = cmd.Stdout
		}
	}
	cmd.ExtraFiles = []*os.File{errLog}
	if r.caught != nil {
		<-r.caught
	}
	if r.cg != nil {
		if err := r.waitJoined(); err != nil {
			return nil, err
		}
		r.trace.stage("cgroups joined")
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting runsc: %w", err)
	}
	return cmd, nil
}

// gVisor reads and writes a regular file it is given as stdio at
// offsets of its own, from the start: a command's output would overwrite
// what the file held before (`{ echo a; agentkernel run …; } > log`) and
// what is written after it. Such a file reaches runsc as a pipe, which
// agentkernel copies through the file's own offset; pipes, terminals,
// sockets and devices go to runsc as they are.

func readerOf(in io.Reader) io.Reader {
	if f, ok := in.(*os.File); ok && isRegular(f) {
		return struct{ io.Reader }{f}
	}
	return in
}

func writerOf(out io.Writer) io.Writer {
	if f, ok := out.(*os.File); ok && isRegular(f) {
		return struct{ io.Writer }{f}
	}
	return out
}

// sameRegularFile reports whether a and b are the same regular file.
func sameRegularFile(a, b io.Writer) bool {
	fa, ok := a.(*os.File)
	if !ok {
		return false
	}
	fb, ok := b.(*os.File)
	if !ok {
		return false
	}
	sa, err := fa.Stat()
	if err != nil || !sa.Mode().IsRegular() {
		return false
	}
	sb, err := fb.Stat()
	return err == nil && os.SameFile(sa, sb)
}

func isRegular(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode().IsRegular()
}

// prepare moves the calling (locked) thread into a mount namespace of
// its own and builds the bundle there.
func (r *run) prepare(con *console) error {
	flags := unix.CLONE_FS | unix.CLONE_NEWNS
	if netNeeded(r.spec) {
		// The sandbox's network namespace, where its TUN device is
		// made and runsc runs (setupNetwork).
		flags |= unix.CLONE_NEWNET
	}
	if err := unix.Unshare(flags); err != nil {
		return fmt.Errorf("a mount namespace for the run: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the run's mounts private: %w", err)
	}
	if r.keep == "" {
		// The bundle and the root's writable layers in memory where
		// the kernel allows.
		r.mem = r.memScratch()
	}
	if err := os.Mkdir(r.state(), 0o700); err != nil {
		return err
	}
	r.trace.stage("namespace unshared")
	if err := r.mountRoot(); err != nil {
		return err
	}
	r.trace.stage("root mounted")
	mounts, err := r.volumes()
	if err != nil {
		return err
	}
	r.trace.stage("volumes mounted")
	pspec := r.spec
	if r.keep != "" {
		c := *r.spec
		c.Args = []string{idlePath}
		pspec = &c
	}
	p, err := resolveProcess(pspec, r.rootfs())
	if err != nil {
		return err
	}
	if r.keep != "" {
		// The idle init; commands come later, through runsc exec.
		idle, err := r.idleMount()
		if err != nil {
			return err
		}
		mounts = append(mounts, idle)
		p.args = []string{idlePath}
		if m, ok, err := r.keptTmp(); err != nil {
			return err
		} else if ok {
			mounts = append(mounts, m)
		}
	} else if err := lookCommand(r.rootfs(), p, r.spec); err != nil {
		return err
	}
	sm, err := r.secretMounts(p)
	if err != nil {
		return err
	}
	mounts = append(mounts, sm...)
	if netNeeded(r.spec) {
		netMounts, err := r.setupNetwork()
		if err != nil {
			return err
		}
		mounts = append(netMounts, mounts...)
	}
	s := ociSpec(r.spec, p, mounts, cgroupName(r.id))
	if hostWritable(r.spec) {
		s.Linux.Seccomp = native.SetidGuardProfile()
	}
	if r.keep != "" && s.Linux.CgroupsPath == "" {
		// Named by us even without limits (runsc would name it after
		// the container), so that a boot after a killed supervisor can
		// remove what runsc could not (Boot).
		s.Linux.CgroupsPath = cgroupName(r.id)
	}
	if r.keep != "" {
		// The sandbox's own container, named: further containers
		// (detached commands) join it, and a memory snapshot's restore
		// finds each by its name (detached_linux.go).
		s.Annotations = map[string]string{annSandboxID: r.id, annType: "sandbox", annName: "sandbox"}
	}
	// The CPU quota from the command's start, not over gVisor's boot.
	cpuQuotaHook(s)
	if r.noCgroups {
		if r.cg != nil && s.Linux.Resources != nil && s.Linux.Resources.CPU != nil {
			// No hook could be made: the quota from the boot on.
			cpu := s.Linux.Resources.CPU
			if err := r.cg.setCPUQuota(*cpu.Quota, *cpu.Period); err != nil {
				return err
			}
		}
		// The limits are in the cgroups made here (or there are none):
		// runsc runs with --ignore-cgroups.
		s.Linux.Resources, s.Linux.CgroupsPath = nil, ""
	}
	if netNeeded(r.spec) {
		for i := range s.Linux.Namespaces {
			if s.Linux.Namespaces[i].Type == specs.NetworkNamespace {
				s.Linux.Namespaces[i].Path = r.netns()
			}
		}
	}
	if con != nil {
		s.Process.Terminal = true
		if envIndex(s.Process.Env, "TERM") < 0 {
			s.Process.Env = append(s.Process.Env, "TERM=xterm")
		}
		if rows, cols, ok := con.size(); ok {
			s.Process.ConsoleSize = &specs.Box{Height: uint(rows), Width: uint(cols)}
		}
	}
	return writeConfig(r.bundle(), s)
}

// runCmd is `runsc run` of the bundle as container id, its state in
// state, its error log on descriptor 3.
func (r *run) runCmd(state, id string, con *console) *exec.Cmd {
	args := append(r.globalArgs(state), "--log-fd=3")
	if r.noCgroups {
		args = append(args, "--ignore-cgroups")
	}
	if r.restoreImage != "" {
		// A memory snapshot's first boot: the sandbox as it was.
		args = append(args, "restore", "--image-path", r.restoreImage, "--bundle", r.bundle())
	} else {
		args = append(args, "run", "--bundle", r.bundle())
	}
	if con != nil {
		args = append(args, "--console-socket", con.path)
	}
	cmd := exec.Command(r.runsc, append(args, id)...)
	// Its own process group: a terminal's Ctrl-C reaches the command
	// through the run (signal), not runsc itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.keep != "" {
		// A persistent sandbox ends with the process that booted it (its
		// supervisor): runsc goes when the thread that started it does,
		// and its sandbox and gofer with it.
		cmd.SysProcAttr.Pdeathsig = unix.SIGKILL
	}
	return cmd
}

// globalArgs are runsc's flags for the sandbox whose state is in state,
// the same for each of its containers.
func (r *run) globalArgs(state string) []string {
	network := "--network=none"
	if netNeeded(r.spec) {
		network = "--network=sandbox"
	}
	args := []string{"--root", state, "--platform=systrap", network, "--overlay2=" + r.overlay()}
	if r.keep != "" {
		// Files copied in from the host are seen at once.
		args = append(args, "--file-access=shared")
	}
	if hostWritable(r.spec) {
		args = append(args, "--oci-seccomp") // the set-id guard
	}
	if d := os.Getenv(DebugLogEnv); d != "" {
		args = append(args, "--debug", "--debug-log="+strings.TrimSuffix(d, "/")+"/")
	}
	return args
}

// overlay is runsc's --overlay2: the root's writes go to a file in the
// run's directory, sized by the disk limit; a read-only root has none.
func (r *run) overlay() string {
	if r.spec.ReadOnlyRoot || r.keep != "" {
		// A persistent sandbox writes through the gofer to its
		// writable layer, where files are copied in and out and which
		// outlives the boot.
		return "none"
	}
	medium := "dir=" + r.dir
	if strings.ContainsAny(r.dir, ",:") {
		medium = "memory" // the flag's syntax cannot hold such a path
	}
	o := "root:" + medium
	if mb := r.spec.Resources.DiskMB; mb > 0 {
		o += ",size=" + strconv.FormatInt(mb, 10) + "m"
	}
	return o
}

// memScratch mounts a tmpfs on the run's scratch directory, for the
// bundle and the root's writable layers (config.json, the mount points
// runsc's gofer makes): in memory, no file system work for them at the
// start or after the run. It returns the directory, or "" when that
// tmpfs cannot be used, and the run keeps them in its directory on disk
// instead (the layout before): the tmpfs cannot be mounted, or it
// cannot hold the extended attributes the root overlay keeps in its
// upper layer (trusted.overlay.*, or user.overlay.* with userxattr; a
// kernel built without CONFIG_TMPFS_XATTR, or before 6.6 for user.*).
// One setxattr on the tmpfs's own root tells.
func (r *run) memScratch() string {
	dir := r.dir + "/scratch"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return ""
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0700,size=16m"); err != nil {
		os.Remove(dir)
		r.trace.stage("scratch tmpfs: " + err.Error())
		return ""
	}
	name := "trusted.agentkernel"
	if r.spec.Rootfs.UserXattr {
		name = "user.agentkernel"
	}
	err := unix.Setxattr(dir, name, []byte{'1'}, 0)
	if err == nil && r.b.noScratchXattr {
		err = unix.EOPNOTSUPP
	}
	if err != nil {
		r.dropMem(dir)
		r.trace.stage("scratch tmpfs has no " + name + ": " + err.Error())
		return ""
	}
	return dir
}

// dropMem unmounts the scratch tmpfs at dir (nothing in it is in use)
// and removes its mount point.
func (r *run) dropMem(dir string) {
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	os.Remove(dir)
}

// mountRoot mounts the image's layers on the bundle's rootfs: an
// overlay whose upper layer is in the run's scratch directory. The
// sandbox's own writes go to gVisor's overlay (overlay); this upper
// layer takes what runsc's gofer makes on the host side, the mount
// points of volumes. Where the overlay refuses an upper layer on the
// scratch tmpfs (what memScratch's probe did not foresee), the bundle
// and the layers move to the run's directory on disk.
func (r *run) mountRoot() error {
	err := r.mountRootIn()
	var refused *overlayMountError
	if err != nil && r.mem != "" && errors.As(err, &refused) {
		r.trace.stage("root overlay on the scratch tmpfs: " + err.Error())
		r.dropMem(r.mem)
		r.mem = ""
		err = r.mountRootIn()
	}
	return err
}

// overlayMountError is mountOverlay's failure of mount(2) itself.
type overlayMountError struct {
	dst string
	err error
}

func (e *overlayMountError) Error() string { return "mount overlay on " + e.dst + ": " + e.err.Error() }
func (e *overlayMountError) Unwrap() error { return e.err }

// mountRootIn is mountRoot in scratch() as it is.
func (r *run) mountRootIn() error {
	for _, d := range []string{r.bundle(), r.rootfs()} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	layers := r.spec.Rootfs.Layers
	upper, work := r.scratch()+"/upper", r.scratch()+"/work"
	if r.keep != "" {
		// A persistent sandbox's writable layer, kept from one boot
		// to the next in its own directory.
		upper, work = r.keep+"/upper", r.keep+"/work"
	}
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil && !(r.keep != "" && errors.Is(err, os.ErrExist)) {
			return err
		}
	}
	// The root directory's owner and mode are the upper layer's: the
	// top layer's.
	var st unix.Stat_t
	if err := unix.Stat(layers[len(layers)-1], &st); err != nil {
		return fmt.Errorf("the image's top layer: %w", err)
	}
	if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
		return err
	}
	lower := make([]string, 0, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		lower = append(lower, layers[i]) // the top layer first
	}
	extra := ""
	if r.spec.Rootfs.UserXattr {
		extra = ",userxattr"
	}
	if err := r.mountOverlay(lower, upper, work, extra, r.rootfs()); err != nil {
		return fmt.Errorf("the image's layers: %w", err)
	}
	return nil
}

// mountOverlay is mountOverlay for one of the run's overlays (nodev,
// nosuid). A run's upper layers are removed with its directory, unread,
// so they are mounted volatile: the kernel would otherwise sync the
// whole file system they are on (the data directory's) when the overlay
// is unmounted, which the run's end waited for (15 to 20 ms of a run of
// /bin/true on ext4). A persistent sandbox's layers outlive the boot and
// are synced as before. Where the volatile mount fails (a kernel before
// 5.10 refuses the option) the overlay is mounted without it.
func (r *run) mountOverlay(lower []string, upper, work, extra, dst string) error {
	const flags = unix.MS_NODEV | unix.MS_NOSUID
	if r.keep == "" && mountOverlay(lower, upper, work, extra+",volatile", dst, flags) == nil {
		return nil
	}
	return mountOverlay(lower, upper, work, extra, dst, flags)
}

// mountOverlay mounts an overlay of lower (top first) on dst, with upper
// and work when upper is set. An option string too long for mount(2)
// names the layers relative to their common parent, made the thread's
// working directory (the thread has its own: CLONE_FS).
func mountOverlay(lower []string, upper, work, extra, dst string, flags uintptr) error {
	opts := func(lower []string) string {
		o := "lowerdir=" + strings.Join(lower, ":")
		if upper != "" {
			o += ",upperdir=" + upper + ",workdir=" + work
		}
		return o + extra
	}
	data := opts(lower)
	if len(data) > maxMountData {
		common := filepath.Dir(lower[0])
		for _, l := range lower {
			for common != "/" && !strings.HasPrefix(l, common+"/") {
				common = filepath.Dir(common)
			}
		}
		rel := make([]string, len(lower))
		for i, l := range lower {
			rel[i] = strings.TrimPrefix(l, common+"/")
		}
		if err := unix.Chdir(common); err != nil {
			return err
		}
		if data = opts(rel); len(data) > maxMountData {
			return fmt.Errorf("%d layers: more than an overlay's options can name", len(lower))
		}
	}
	if err := unix.Mount("overlay", dst, "overlay", flags, data); err != nil {
		return &overlayMountError{dst, err}
	}
	return nil
}

// volumes are the spec's mounts as the bundle's config.json names them.
// Copy-on-write volumes are overlays made here, their writable layers in
// the run's directory.
func (r *run) volumes() ([]specs.Mount, error) {
	var out []specs.Mount
	for i, m := range r.spec.Mounts {
		dest := path.Clean(m.Dest)
		if !path.IsAbs(m.Dest) {
			return nil, fmt.Errorf("mount destination %q is not absolute", m.Dest)
		}
		if m.Kind == sandbox.MountTmpfs {
			o := append([]string{"nosuid", "nodev", "mode=755"}, sizeOption(r.spec.Resources.DiskMB)...)
			if m.ReadOnly {
				o = append(o, "ro")
			}
			out = append(out, specs.Mount{Destination: dest, Type: "tmpfs", Source: "tmpfs", Options: o})
			continue
		}
		if m.Kind != sandbox.MountBind && m.Kind != sandbox.MountCopyOnWrite {
			return nil, fmt.Errorf("mount %s: unknown kind %q", m.Dest, m.Kind)
		}
		src := filepath.Clean(m.Source)
		if !filepath.IsAbs(m.Source) {
			return nil, fmt.Errorf("mount source %q is not absolute", m.Source)
		}
		if src == "/proc" || strings.HasPrefix(src, "/proc/") {
			return nil, fmt.Errorf("mount %s: host /proc cannot be mounted into a sandbox", m.Source)
		}
		if m.Create {
			if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(src, 0o700); err != nil {
					return nil, fmt.Errorf("mount %s: %w", m.Source, err)
				}
			}
		}
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("mount %s:%s: %w", m.Source, m.Dest, err)
		}
		if m.Kind == sandbox.MountCopyOnWrite && !m.ReadOnly {
			merged, err := r.cow(i, m, src)
			if err != nil {
				return nil, fmt.Errorf("mount %s:%s: %w", m.Source, m.Dest, err)
			}
			src = merged
		} else if m.Kind == sandbox.MountBind && !m.ReadOnly {
			owned, err := r.ownedBind(i, src)
			if err != nil {
				return nil, fmt.Errorf("mount %s:%s: %w", m.Source, m.Dest, err)
			}
			src = owned
		}
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, specs.Mount{Destination: dest, Type: "bind", Source: src, Options: []string{"rbind", mode}})
	}
	return out, nil
}

// cow shows src (with m.Layers over it) through an overlay whose
// writable layer is in the run's directory, and returns where.
func (r *run) cow(i int, m sandbox.Mount, src string) (string, error) {
	base := r.dir
	if r.keep != "" {
		// A persistent sandbox's: kept from one boot to the next in its
		// directory, where native keeps its own (<dir>/cowN/upper).
		base = r.keep
	}
	d := filepath.Join(base, "cow"+strconv.Itoa(i))
	upper, work, merged := d+"/upper", d+"/work", d+"/merged"
	for _, p := range []string{d, upper, work, merged} {
		if err := os.Mkdir(p, 0o700); err != nil && !(r.keep != "" && errors.Is(err, os.ErrExist)) {
			return "", err
		}
	}
	// The merged directory's owner and mode are its upper layer's:
	// those of src.
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", errors.New("a copy-on-write volume must be a directory")
	}
	if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return "", err
	}
	if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
		return "", err
	}
	lower := make([]string, 0, len(m.Layers)+1)
	for j := len(m.Layers) - 1; j >= 0; j-- {
		lower = append(lower, m.Layers[j])
	}
	lower = append(lower, src)
	if err := r.mountOverlay(lower, upper, work, "", merged); err != nil {
		return "", err
	}
	return merged, nil
}

// lookCommand finds the command in the image as runsc will (a path, or
// each directory of PATH) and fails with ErrNotFound or ErrCannotInvoke
// when it is missing or not executable there. Where the answer may lie
// outside the image's own files (a volume, a symbolic link), it leaves
// the answer to runsc.
func lookCommand(root string, p *process, spec *sandbox.Spec) error {
	arg0 := p.args[0]
	var candidates []string
	if strings.Contains(arg0, "/") {
		c := arg0
		if !path.IsAbs(c) {
			c = path.Join(p.cwd, c)
		}
		candidates = []string{c}
	} else {
		pathEnv := ""
		if i := envIndex(p.env, "PATH"); i >= 0 {
			_, pathEnv, _ = strings.Cut(p.env[i], "=")
		}
		for _, d := range strings.Split(pathEnv, ":") {
			if path.IsAbs(d) {
				candidates = append(candidates, path.Join(d, arg0))
			}
		}
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(rootFd)
	denied := ""
	for _, c := range candidates {
		if underMount(c, spec) {
			return nil
		}
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT}
		fd, err := unix.Openat2(rootFd, c, &how)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			// Missing in the image's own files; through a symbolic link
			// it may be in a volume.
			how.Resolve |= unix.RESOLVE_NO_SYMLINKS
			if fd, err := unix.Openat2(rootFd, c, &how); err == nil {
				unix.Close(fd)
				return nil
			} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
				return nil
			}
			continue
		}
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return nil
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			denied = "is a directory"
		case st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0:
			denied = "permission denied"
		default:
			return nil
		}
		if strings.Contains(arg0, "/") {
			break
		}
	}
	if denied != "" {
		return fmt.Errorf("%s: %s: %w", arg0, denied, sandbox.ErrCannotInvoke)
	}
	return fmt.Errorf("%s: %w", arg0, sandbox.ErrNotFound)
}

// underMount reports whether p lies on one of the sandbox's mounts
// rather than in the image.
func underMount(p string, spec *sandbox.Spec) bool {
	dests := []string{"/proc", "/dev", "/sys"}
	if spec.ReadOnlyRoot {
		dests = append(dests, "/tmp")
	}
	for _, m := range spec.Mounts {
		dests = append(dests, path.Clean(m.Dest))
	}
	for _, d := range dests {
		if p == d || d == "/" || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
