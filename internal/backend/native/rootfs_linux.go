package native

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Flags of the mounts the sandbox gets.
const (
	msTmp    = unix.MS_NOSUID | unix.MS_NODEV
	msMasked = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
)

var (
	// devices are bound (rootless) or created (root) in the sandbox's /dev.
	devices = []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}
	// hostImageDirs make up the "host" image, each bound read-only when it
	// exists (or recreated as the same symlink).
	hostImageDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}
	// hostImageHidden are host secrets covered in the host image's /etc.
	hostImageHidden = []string{"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/ssh", "/etc/sudoers", "/etc/sudoers.d", "/etc/security/opasswd"}
	// scratchCandidates are host directories the per-run tmpfs may cover in
	// the init's private mount namespace; the first one no layer or volume
	// lives under is used.
	scratchCandidates = []string{"/tmp", "/mnt", "/run", "/var/tmp", "/media", "/srv", "/opt", "/home"}
)

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		if src == "" {
			src = fstype
		}
		return fmt.Errorf("mount %s on %s: %w", src, dst, err)
	}
	return nil
}

// mountFreshProc mounts a proc of the new PID namespace over /proc:
// forking the exec stage writes /proc/<pid>/uid_map, which must name our
// child. The same mount later moves into the new root (moveProc).
func (s *initState) mountFreshProc() error {
	err := mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	if errors.Is(err, unix.EPERM) {
		// The kernel refuses a new proc where the caller's own has
		// parts hidden (mount_too_revealing): a container's masked
		// paths.
		return fmt.Errorf("%w (where parts of /proc are masked, as a container masks them, the kernel refuses a new one: podman --security-opt unmask=ALL, docker --security-opt systempaths=unconfined, or --privileged: docs/containers.md)", err)
	}
	return err
}

// setupNetwork brings up loopback and sets the hostname. A sandbox with
// egress also gets its TUN device, eth0, addressed and routed as
// tundev.DefaultLayout says; the device goes to the sandbox's owner, whose
// network helper serves its other end (netproc, startNetwork). Where the
// device cannot be opened (/dev/net/tun missing, as in a container
// without the device, or not open to a rootless caller), the sandbox gets a listening socket on
// 127.0.0.1:proxyPort instead, and its programs the proxy variables that
// name it: the helper serves it as an HTTP proxy under the same policy.
func (s *initState) setupNetwork() error {
	if !s.loUp {
		if err := prestart.LoopbackUp(); err != nil {
			if errors.Is(err, unix.EPERM) && !s.cfg.Rootless {
				return fmt.Errorf("lo up: %w (root needs CAP_NET_ADMIN for it, which a container withholds unless it runs with --cap-add NET_ADMIN or --privileged: docs/containers.md)", err)
			}
			return fmt.Errorf("lo up: %w", err)
		}
	}
	if s.cfg.Network {
		mode := netproc.ModeTUN
		dev, err := tundev.Open(tunName)
		if err == nil {
			err = tundev.Persist(dev)
			if err == nil {
				err = tundev.Configure(tunName, tundev.DefaultLayout())
			}
			if err != nil {
				dev.Close()
				return err
			}
			s.tunUp = true
		} else {
			mode = netproc.ModeProxy
			if dev, err = proxyListener(); err != nil {
				return fmt.Errorf("the network proxy's socket: %w", err)
			}
			s.cfg.Exec.Env = append(s.cfg.Exec.Env, proxyEnv()...)
		}
		switch {
		case s.thread != nil:
			// This thread is in the sandbox's network namespace: a
			// handle on it, for published ports in proxy mode.
			var ns *os.File
			if mode == netproc.ModeProxy {
				if ns, err = os.Open("/proc/thread-self/ns/net"); err != nil {
					dev.Close()
					return fmt.Errorf("the sandbox's network namespace: %w", err)
				}
			}
			if err := s.thread.r.startNetwork(dev, mode, ns); err != nil {
				return err
			}
		case s.cfg.Persistent:
			s.netDev, s.netMode = dev, mode // for the supervisor (becomeIdle)
		default:
			// The parent starts the helper (awaitNetwork).
			err := unix.Sendmsg(int(s.sock.Fd()), []byte{'N', mode[0]}, unix.UnixRights(int(dev.Fd())), nil, 0)
			dev.Close()
			if err != nil {
				return fmt.Errorf("handing the network device to agentkernel: %w", err)
			}
		}
	}
	return setHostname(s.cfg.Hostname)
}

// mknodHint says why root may not make the sandbox's device nodes.
const mknodHint = "root needs CAP_MKNOD for the sandbox's /dev, which a container may withhold unless it runs with --cap-add MKNOD or --privileged: docs/containers.md"

// setHostname sets the sandbox's host name in its UTS namespace.
func setHostname(name string) error {
	err := unix.Sethostname([]byte(name))
	if errors.Is(err, unix.EPERM) {
		// Inside its own UTS namespace only a seccomp filter refuses
		// it: a container's default profile, without CAP_SYS_ADMIN.
		return fmt.Errorf("sethostname: %w (a container's seccomp profile refuses it without CAP_SYS_ADMIN: run the container with --security-opt seccomp=unconfined: docs/containers.md)", err)
	}
	if err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	return nil
}

// proxyPort is where a sandbox in proxy mode finds its HTTP proxy.
const proxyPort = 3128

// proxyListener listens on 127.0.0.1:proxyPort in the sandbox's network
// namespace (the caller's).
func proxyListener() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: proxyPort, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, 256); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "proxy"), nil
}

// proxyEnv are the variables that send a sandbox's programs to its proxy.
func proxyEnv() []string {
	url := "http://127.0.0.1:" + strconv.Itoa(proxyPort)
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env = append(env, k+"="+url, strings.ToLower(k)+"="+url)
	}
	return append(env, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
}

// tunName is the sandbox's network device.
const tunName = "eth0"

// writeResolvConf points the sandbox's /etc/resolv.conf at the network
// helper's resolver, and gives it an /etc/hosts naming its own hostname
// (programs look it up, and the resolver would be asked otherwise): both
// read-only files bound over the image's, as a container runtime does.
// It also waits until the kernel has finished the TUN device's IPv6
// address (tundev.AwaitLocal), which it did while the stages between the
// network's and this one ran.
func (s *initState) writeResolvConf() error {
	if !s.cfg.Network {
		return nil
	}
	l := tundev.DefaultLayout()
	if s.tunUp {
		if err := tundev.AwaitLocal(l); err != nil {
			return err
		}
	}
	resolv := "# written by agentkernel: the sandbox's resolver applies its network policy\nnameserver " + l.DNS4.String() + "\n"
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + l.Addr4.Addr().String() + "\t" + s.cfg.Hostname + "\n"
	if l.HasIPv6() {
		resolv += "nameserver " + l.DNS6.String() + "\n"
		hosts += l.Addr6.Addr().String() + "\t" + s.cfg.Hostname + "\n"
	}
	for _, f := range []struct{ name, body string }{{"resolv.conf", resolv}, {"hosts", hosts}} {
		src := filepath.Join(s.scratch, f.name)
		if err := os.WriteFile(src, []byte(f.body), 0o644); err != nil {
			return err
		}
		dst, err := s.inRoot("/etc/" + f.name)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(dst); err != nil || !fi.Mode().IsRegular() {
			if err := makeMountPoint(src, dst); err != nil {
				return fmt.Errorf("the image has no /etc/%s to replace and it cannot be created: %w", f.name, err)
			}
		}
		if err := bindMount(src, dst, true, false); err != nil {
			return err
		}
	}
	return s.writeTrustBundle()
}

// prepareScratch mounts the per-run tmpfs (sized by DiskMB) that holds the
// writable layer and the new root's mount point. It covers a host
// directory, but only in our private mount namespace.
func (s *initState) prepareScratch() error {
	if s.scratch == "" {
		var err error
		if s.scratch, err = scratchDir(s.cfg); err != nil {
			return err
		}
	}
	if err := mount("tmpfs", s.scratch, "tmpfs", msTmp, "mode=0700,size="+strconv.FormatInt(s.cfg.DiskMB, 10)+"m"); err != nil {
		return err
	}
	s.root = s.scratch + "/root"
	return os.Mkdir(s.root, 0o755)
}

// scratchDir picks the directory the scratch tmpfs is mounted on: the
// first candidate that exists and holds no layer, upper dir or volume.
func scratchDir(cfg *initConfig) (string, error) {
	used := append(append([]string{}, cfg.Layers...), cfg.Upper, cfg.CowDir)
	for _, m := range cfg.Mounts {
		used = append(append(used, m.Source), m.Layers...)
	}
	for _, c := range scratchCandidates {
		if fi, err := os.Stat(c); err != nil || !fi.IsDir() || underAny(c, used) {
			continue
		}
		return c, nil
	}
	return "", fmt.Errorf("no directory for scratch space (all of %v hold layers or volumes)", scratchCandidates)
}

func underAny(dir string, paths []string) bool {
	for _, p := range paths {
		if p != "" && (p == dir || strings.HasPrefix(p, dir+"/")) {
			return true
		}
	}
	return false
}

// mountRootfs assembles the new root at s.root: an overlay of the image
// layers with the writable layer on the scratch tmpfs (or in the run
// directory for --keep), or the host image.
func (s *initState) mountRootfs() error {
	if s.cfg.Host {
		return s.mountHostImage()
	}
	upper, work := s.scratch+"/upper", s.scratch+"/work"
	if s.cfg.Upper != "" {
		upper, work = s.cfg.Upper+"/upper", s.cfg.Upper+"/work"
	} else {
		if err := os.Mkdir(upper, 0o755); err != nil {
			return err
		}
		if err := os.Mkdir(work, 0o700); err != nil {
			return err
		}
	}
	layers, err := s.idmappedLayers()
	if err != nil {
		return err
	}
	// The merged root's owner and mode come from the upper dir: copy the
	// top layer's (as the sandbox sees it: through its idmap).
	var st unix.Stat_t
	if err := unix.Stat(layers[len(layers)-1], &st); err != nil {
		return err
	}
	if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
		return err
	}
	lower := make([]string, len(layers))
	for i, l := range layers {
		lower[len(lower)-1-i] = l // overlay wants the top layer first
	}
	return s.mountOverlay(lower, upper, work, s.root, unix.MS_NODEV)
}

// idmappedLayers returns the directories to stack as the overlay's
// lower layers. The image store keeps layers with the image's own owners
// (uid 0 is 0 on disk); a root caller's sandbox sees them through
// read-only idmapped clones, attached on the scratch space, that shift
// them into its own block of host ids by the command's user namespace,
// so that no two sandboxes share ids and no file of the store ever
// appears as host root's. Rootless (no nested user namespace), the
// layers are the caller's own files and are stacked as they are.
func (s *initState) idmappedLayers() ([]string, error) {
	if !s.cfg.NestUserNS {
		return s.cfg.Layers, nil
	}
	if err := s.stubEntered(); err != nil {
		return nil, err
	}
	if s.usernsFd < 0 {
		return nil, errors.New("no user namespace to idmap the image layers with")
	}
	dir := s.scratch + "/layers"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	out := make([]string, len(s.cfg.Layers))
	for i, l := range s.cfg.Layers {
		dst := dir + "/" + strconv.Itoa(i)
		if err := os.Mkdir(dst, 0o700); err != nil {
			return nil, err
		}
		if err := s.idmapped(l, dst, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV); err != nil {
			return nil, fmt.Errorf("image layer %s: %w", l, err)
		}
		out[i] = dst
	}
	return out, nil
}

// mountOverlay mounts an overlay, falling back to paths relative to the
// layers' common parent when the option string would exceed a page.
func (s *initState) mountOverlay(lower []string, upper, work, dst string, flags uintptr) error {
	extra := ""
	if s.cfg.Rootless {
		extra = ",userxattr"
	}
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + upper + ",workdir=" + work + extra
	if len(opts) < 4000 {
		return mount("overlay", dst, "overlay", flags, opts)
	}
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
	opts = "lowerdir=" + strings.Join(rel, ":") + ",upperdir=" + upper + ",workdir=" + work + extra
	wd, _ := os.Getwd()
	if err := os.Chdir(common); err != nil {
		return err
	}
	defer os.Chdir(wd)
	return mount("overlay", dst, "overlay", flags, opts)
}

// mountHostImage builds the "host" image: a tmpfs root holding read-only
// binds of the host's /usr, /bin, /lib*, /etc, with /etc's secrets hidden.
func (s *initState) mountHostImage() error {
	if err := mount(s.root, s.root, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if err := os.Lchown(s.root, s.cfg.RootUID, s.cfg.RootGID); err != nil {
		return err
	}
	for _, d := range hostImageDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		dst := s.root + d
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			continue
		}
		if !fi.IsDir() {
			continue
		}
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		if err := bindMount(d, dst, true, false); err != nil {
			return err
		}
	}
	for _, p := range hostImageHidden {
		if err := s.mask(s.root + p); err != nil {
			return err
		}
	}
	return nil
}

// bindMount binds src on dst (recursively) and sets read-only and
// nosuid/nodev on the whole tree.
func bindMount(src, dst string, ro, dev bool) error {
	if err := mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if !dev {
		attr.Attr_set |= unix.MOUNT_ATTR_NODEV
	}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", dst, err)
	}
	return nil
}

// mask hides p: /dev/null over a file, an empty read-only tmpfs over a
// directory. Missing paths are fine.
func (s *initState) mask(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return mount("tmpfs", p, "tmpfs", msMasked, maskDirOpts)
	}
	return mount("/dev/null", p, "", unix.MS_BIND, "")
}

// moveProc moves the proc mounted first into the new root and applies
// the masked and read-only paths. /proc/sys read-only is the second fence
// in front of kernel.core_pattern and friends (the first: the sandbox's
// root is not host root).
func (s *initState) moveProc() error {
	dst := s.root + "/proc"
	if err := os.MkdirAll(dst, 0o555); err != nil {
		return err
	}
	if err := mount("/proc", dst, "", unix.MS_MOVE, ""); err != nil {
		return err
	}
	s.proc = dst
	for _, p := range prestart.MaskedPaths {
		if strings.HasPrefix(p, "/proc/") {
			if err := s.mask(s.root + p); err != nil {
				return err
			}
		}
	}
	for _, p := range prestart.ReadonlyPaths {
		dst := s.root + p
		if _, err := os.Lstat(dst); err != nil {
			continue
		}
		if err := mount(dst, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := mount(dst, dst, "", unix.MS_BIND|unix.MS_REMOUNT|msMasked, ""); err != nil {
			return err
		}
	}
	return nil
}

// moveStagedProc is moveProc where PID 1 mounted proc, with its masked
// and read-only paths covered, on the scratch space (stageProcScript):
// the thread's /proc stays the host's, whose pids it knows its stages by.
func (s *initState) moveStagedProc() error {
	dst := s.root + "/proc"
	if err := os.MkdirAll(dst, 0o555); err != nil {
		return err
	}
	if s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s thread: waiting for PID 1's mounts\n", monotonic())
	}
	if err := s.thread.procMounted(); err != nil {
		return err
	}
	if s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s thread: PID 1's mounts ready\n", monotonic())
	}
	return mount(s.scratch+"/proc", dst, "", unix.MS_MOVE, "")
}

// mountDev builds a minimal /dev on a tmpfs: the six harmless devices, a
// private devpts, /dev/shm and the fd links.
func (s *initState) mountDev() error {
	dev := s.root + "/dev"
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	fs := devFileSystems(s.cfg)
	if err := mount(fs[0].source, dev, fs[0].fstype, fs[0].flags, fs[0].opts); err != nil {
		return err
	}
	for _, d := range devices {
		p := dev + "/" + d.name
		if !s.cfg.Rootless {
			if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
				if errors.Is(err, unix.EPERM) {
					return fmt.Errorf("mknod %s: %w (%s)", p, err, mknodHint)
				}
				return fmt.Errorf("mknod %s: %w", p, err)
			}
			// mknod is subject to the umask.
			if err := unix.Chmod(p, 0o666); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		if err := mount("/dev/"+d.name, p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for _, m := range fs[1:] {
		if err := os.Mkdir(dev+m.dir, os.FileMode(m.mode)); err != nil {
			return err
		}
		if err := mount(m.source, dev+m.dir, m.fstype, m.flags, m.opts); err != nil {
			return err
		}
	}
	for _, l := range devLinks {
		if err := os.Symlink(l.target, dev+"/"+l.name); err != nil {
			return err
		}
	}
	return nil
}

// devMount is one of /dev's file systems.
type devMount struct {
	dir            string // below /dev ("" for /dev itself)
	mode           uint32 // of its mount point
	source, fstype string
	flags          uintptr
	opts           string
}

// devFileSystems are /dev's tmpfs, its private devpts and /dev/shm, in
// mount order, for mountDev and for a thread-built sandbox's PID 1
// (stubInitScript).
func devFileSystems(cfg *initConfig) [3]devMount {
	owner := rootOwner(cfg)
	pts := "newinstance,ptmxmode=0666,mode=0620"
	if !cfg.Rootless {
		pts += ",gid=" + strconv.Itoa(cfg.RootGID+5) // tty
	}
	return [3]devMount{
		{"", 0o755, "tmpfs", "tmpfs", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0755,size=65536k" + owner},
		{"/pts", 0o755, "devpts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, pts},
		{"/shm", 0o1777, "shm", "tmpfs", msTmp | unix.MS_NOEXEC, "mode=1777,size=65536k" + owner},
	}
}

// maskDirOpts are the options of the empty read-only tmpfs that masks a
// directory.
const maskDirOpts = "size=0,mode=0555"

// devLinks are /dev's symlinks.
var devLinks = []struct{ name, target string }{
	{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
	{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
}

// stagedTmpfs are the sandbox's /tmp and /run: where, and with what
// options.
func stagedTmpfs(cfg *initConfig) []struct{ dir, opts string } {
	return []struct{ dir, opts string }{
		{"/tmp", "mode=1777,size=" + strconv.FormatInt(cfg.DiskMB, 10) + "m" + rootOwner(cfg)},
		{"/run", "mode=0755,size=65536k" + rootOwner(cfg)},
	}
}

// rootOwner is the mount option that gives a tmpfs to the sandbox's root.
func rootOwner(cfg *initConfig) string {
	return ",uid=" + strconv.Itoa(cfg.RootUID) + ",gid=" + strconv.Itoa(cfg.RootGID)
}

// moveStagedDev, moveStagedSys and moveStagedTmp move what PID 1 staged
// (stageDevScript, stageSysScript, stageTmpScript) into the root.
func (s *initState) moveStagedDev() error { return s.moveStaged("/dev", s.root+"/dev") }

func (s *initState) moveStagedSys() error { return s.moveStaged("/sys", s.root+"/sys") }

func (s *initState) moveStagedTmp() error {
	for _, t := range stagedTmpfs(s.cfg) {
		dst, err := s.inRoot(t.dir)
		if err != nil {
			return err
		}
		if err := s.moveStaged(t.dir, dst); err != nil {
			return err
		}
	}
	return nil
}

// moveStaged moves what PID 1 staged on the scratch space (stubInitScript)
// to dst in the root.
func (s *initState) moveStaged(staged, dst string) error {
	if err := s.thread.procMounted(); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return mount(s.scratch+staged, dst, "", unix.MS_MOVE, "")
}

// mountSys mounts a read-only sysfs (of the new network namespace) with
// firmware and powercap masked.
func (s *initState) mountSys() error {
	dst := s.root + "/sys"
	if err := os.MkdirAll(dst, 0o555); err != nil {
		return err
	}
	if err := mount("sysfs", dst, "sysfs", msMasked, ""); err != nil {
		return err
	}
	for _, p := range prestart.MaskedPaths {
		if strings.HasPrefix(p, "/sys/") {
			if err := s.mask(s.root + p); err != nil {
				return err
			}
		}
	}
	return nil
}

// mountTmp gives the sandbox a private /tmp and /run, owned by its root.
func (s *initState) mountTmp() error {
	for _, t := range stagedTmpfs(s.cfg) {
		dst, err := s.inRoot(t.dir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := mount("tmpfs", dst, "tmpfs", msTmp, t.opts); err != nil {
			return err
		}
	}
	return nil
}

// mountVolumes applies Spec.Mounts in order: binds, copy-on-write overlays
// and tmpfs mounts. With NestUserNS, host directories are idmapped through
// the command's user namespace (see doc.go, "Workspace ownership").
func (s *initState) mountVolumes() error {
	if s.cfg.NestUserNS && needsIDMap(s.cfg) {
		if err := s.stubEntered(); err != nil {
			return err
		}
	}
	for i, m := range s.cfg.Mounts {
		dst, err := s.inRoot(m.Dest)
		if err != nil {
			return fmt.Errorf("%s %s:%s: %w", m.Kind, m.Source, m.Dest, err)
		}
		switch m.Kind {
		case sandbox.MountTmpfs:
			if err = os.MkdirAll(dst, 0o755); err == nil {
				flags := uintptr(msTmp)
				if m.ReadOnly {
					flags |= unix.MS_RDONLY
				}
				// Sized like the writable layer: a tmpfs volume must not be a
				// way around DiskMB (memory limits do not exist rootless).
				err = mount("tmpfs", dst, "tmpfs", flags, "mode=0755,size="+strconv.FormatInt(s.cfg.DiskMB, 10)+"m"+rootOwner(s.cfg))
			}
		case sandbox.MountBind:
			err = s.mountBind(m, dst)
		case sandbox.MountCopyOnWrite:
			if m.ReadOnly {
				err = s.mountBind(m, dst)
			} else {
				err = s.mountCow(i, m, dst)
			}
		default:
			err = fmt.Errorf("unknown mount kind %q", m.Kind)
		}
		if err != nil {
			return fmt.Errorf("%s %s:%s: %w", m.Kind, m.Source, m.Dest, err)
		}
	}
	if s.ownerNsFd >= 0 { // the mounts keep the namespace
		unix.Close(s.ownerNsFd)
		s.ownerNsFd = -1
	}
	return nil
}

// makeMountPoint creates dst as a directory or an empty file, like src.
func makeMountPoint(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return os.MkdirAll(dst, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// openVolumeSource opens a volume's host path without following any
// symlink on the way (policy resolved them when it made the spec) and
// returns the descriptor (the caller closes it) and a path that names
// exactly what it opened, for the mount system calls: whatever is
// renamed or swapped for a symlink in the host path meanwhile (by a
// sandbox that can write a parent directory, say), the mount is of the
// directory that was checked, or fails.
func openVolumeSource(src string) (int, string, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(unix.AT_FDCWD, src, &how)
		switch {
		case err == unix.EINTR || (err == unix.EAGAIN && i < 8):
			continue
		case err == unix.ENOSYS: // before 5.6: one component at a time
			fd, err = openNoSymlinksWalk(src)
		}
		switch {
		case err == unix.ELOOP:
			return -1, "", fmt.Errorf("host path %s has a symlink in it: mount sources are opened without following any "+
				"(was a directory replaced by a symlink after it was checked?); give its real path", src)
		case err != nil:
			return -1, "", err
		}
		return fd, "/proc/self/fd/" + strconv.Itoa(fd), nil
	}
}

// openNoSymlinksWalk is openVolumeSource's open for kernels without
// openat2: the absolute path src opened one component at a time with
// O_NOFOLLOW, ELOOP at the first symlink.
func openNoSymlinksWalk(src string) (int, error) {
	if !filepath.IsAbs(src) || filepath.Clean(src) != src {
		return -1, fmt.Errorf("host path %q is not absolute and clean", src)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(src, "/") {
		if name == "" {
			continue
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(next)
			return -1, unix.ELOOP
		}
		fd = next
	}
	return fd, nil
}

// pinSource is m with its Source pinned (openVolumeSource) and what
// releases the descriptor once mounted.
func pinSource(m sandbox.Mount) (sandbox.Mount, func(), error) {
	fd, src, err := openVolumeSource(m.Source)
	if err != nil {
		return m, nil, err
	}
	m.Source = src
	return m, func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}, nil
}

func (s *initState) mountBind(m sandbox.Mount, dst string) error {
	m, release, err := pinSource(m)
	if err != nil {
		return err
	}
	defer release()
	if err := makeMountPoint(m.Source, dst); err != nil {
		return err
	}
	if s.usernsFd >= 0 {
		if !m.ReadOnly {
			// Written files and chowns land on the invoking user or the
			// sandbox's own ids (bindns_linux.go).
			fd, err := s.ownerUserns()
			if err != nil {
				return err
			}
			return s.idmappedVia(fd, m.Source, dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		}
		return s.idmappedBind(m.Source, dst, m.ReadOnly)
	}
	return bindMount(m.Source, dst, m.ReadOnly, false)
}

// idmappedBind attaches a clone of src at dst whose ids are shifted by
// the command's user namespace: files the host sees as uid N appear as N
// inside. nosuid always.
func (s *initState) idmappedBind(src, dst string, ro bool) error {
	flags := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if ro {
		flags |= unix.MOUNT_ATTR_RDONLY
	}
	return s.idmapped(src, dst, flags)
}

// idmapped attaches at dst a clone of src whose ids are shifted by the
// command's user namespace, with the mount attributes in flags.
func (s *initState) idmapped(src, dst string, flags uint64) error {
	return s.idmappedVia(s.usernsFd, src, dst, flags)
}

// idmappedVia attaches at dst a clone of src whose ids are shifted by
// the user namespace userns.
func (s *initState) idmappedVia(userns int, src, dst string, flags uint64) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | flags, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmapping %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// mountCow shows src at dst through an overlay whose upper layer lives on
// the scratch tmpfs (a run's: gone with it) or, for a persistent
// sandbox, on disk under CowDir (cow<i>/upper and cow<i>/work, kept
// across its starts): the sandbox writes freely, the host copy never
// changes.
func (s *initState) mountCow(i int, m sandbox.Mount, dst string) error {
	m, release, err := pinSource(m)
	if err != nil {
		return err
	}
	defer release()
	fi, err := os.Stat(m.Source)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("copy-on-write needs a directory")
	}
	base := s.scratch + "/cow" + strconv.Itoa(i)
	lower, upper, work := base+"/lower", base+"/upper", base+"/work"
	for _, d := range []string{base, lower, upper, work} {
		if s.cfg.CowDir != "" && d != base && d != lower {
			continue
		}
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	fresh := true
	if s.cfg.CowDir != "" {
		if upper, work, fresh, err = keptCowDirs(s.cfg.CowDir, i); err != nil {
			return err
		}
	}
	// The project, then the snapshot layers over it (Mount.Layers,
	// lowest first), each shown to the sandbox like the project.
	lowers := []string{lower}
	srcs := []string{m.Source}
	for j, l := range m.Layers {
		d := base + "/l" + strconv.Itoa(j)
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
		lowers = append(lowers, d)
		srcs = append(srcs, l)
	}
	for j, src := range srcs {
		if s.usernsFd >= 0 {
			if err := s.idmappedBind(src, lowers[j], true); err != nil {
				return err
			}
		} else if err := bindMount(src, lowers[j], true, false); err != nil {
			return err
		}
	}
	// The merged directory's owner and mode come from the upper one: the
	// top layer's (the project's), as the sandbox sees it, when the layer
	// is made; a kept layer keeps what the sandbox made of them.
	if fresh {
		var st unix.Stat_t
		if err := unix.Stat(lowers[len(lowers)-1], &st); err != nil {
			return err
		}
		if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
			// Rootless, a directory whose owner or group the one-id map does
			// not cover (a group other than the caller's) shows as the
			// overflow id, which cannot be given: the caller's stays.
			if !s.cfg.Rootless || !errors.Is(err, unix.EINVAL) {
				return err
			}
		}
		if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	slices.Reverse(lowers) // overlay wants the top layer first
	return s.mountOverlay(lowers, upper, work, dst, unix.MS_NOSUID|unix.MS_NODEV)
}

// keptCowDirs returns the upper and work directories of a persistent
// sandbox's copy-on-write volume i under dir (cow<i>/upper and
// cow<i>/work), creating what is missing; fresh says the upper one was
// made now. Neither may be anything but a directory (no symlink is
// followed out of dir).
func keptCowDirs(dir string, i int) (upper, work string, fresh bool, err error) {
	base := filepath.Join(dir, "cow"+strconv.Itoa(i))
	upper, work = filepath.Join(base, "upper"), filepath.Join(base, "work")
	for _, d := range []string{base, upper, work} {
		err := os.Mkdir(d, 0o700)
		switch {
		case err == nil:
			if d == upper {
				fresh = true
			}
			continue
		case !errors.Is(err, fs.ErrExist):
			return "", "", false, err
		}
		fi, err := os.Lstat(d)
		if err != nil {
			return "", "", false, err
		}
		if !fi.IsDir() {
			return "", "", false, fmt.Errorf("%s: not a directory", d)
		}
	}
	return upper, work, fresh, nil
}

// needsIDMap reports whether the init needs the command's user namespace
// to idmap something: the image's layers, or a volume that is a host
// directory.
func needsIDMap(cfg *initConfig) bool {
	if !cfg.Host {
		return true
	}
	for _, m := range cfg.Mounts {
		if m.Kind != sandbox.MountTmpfs {
			return true
		}
	}
	return false
}

// inRoot resolves p inside the new root the way the sandbox will see it:
// symlinks in the image are followed but never leave the root.
func (s *initState) inRoot(p string) (string, error) {
	r, err := resolveIn(s.root, p)
	if err != nil {
		return "", err
	}
	return s.root + r, nil
}

// errNoOpenat2: openInRoot cannot help (no root descriptor, or a kernel
// before openat2); the caller resolves with resolveIn instead.
var errNoOpenat2 = errors.New("openat2 unavailable")

// openInRoot opens p inside the directory rootFd the way the sandbox will
// see it, as resolveIn does — symlinks followed and ".." clamped at the
// root (RESOLVE_IN_ROOT), magic links refused — in one system call.
func openInRoot(rootFd int, p string, flags int) (int, error) {
	if rootFd < 0 {
		return -1, errNoOpenat2
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(rootFd, p, &how)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN && i < 8: // a rename raced the look-up
			continue
		case err == unix.ENOSYS:
			return -1, errNoOpenat2
		}
		return fd, err
	}
}

// maxLinks is the symlink budget of resolveIn, the kernel's own.
const maxLinks = 40

// resolveIn returns the root-relative path of p with every symlink below
// root resolved as if root were "/"; missing components are kept as they
// are. A chain longer than maxLinks is an error: handing the rest of the
// path to the kernel would let it follow the image's last link from the
// host's root while we still see it.
func resolveIn(root, p string) (string, error) {
	comps := strings.Split(p, "/")
	cur := ""
	links := 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir("/" + cur)
			if cur == "/" {
				cur = ""
			}
			continue
		}
		next := cur + "/" + c
		fi, err := os.Lstat(root + next)
		if err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return "", fmt.Errorf("%s: %w", p, unix.ELOOP)
			}
			target, err := os.Readlink(root + next)
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(target, "/") {
				cur = ""
			}
			comps = append(strings.Split(target, "/"), comps...)
			continue
		}
		cur = next
	}
	if cur == "" {
		return "/", nil
	}
	return cur, nil
}

// pivotRoot makes s.root the root and detaches the host's tree: after
// this the sandbox cannot name any host path. The exec stage, whose root
// was the old root too, follows along (pivot_root moves every process of
// the mount namespace). ReadOnlyRoot is applied last, once every mount
// point exists.
func (s *initState) pivotRoot() error {
	if s.stub {
		// unshare(CLONE_NEWUSER) fails with EPERM while the old root is
		// still stacked on the new one (the kernel sees a chroot): the stub
		// must have entered its namespaces before we pivot.
		if err := s.stubEntered(); err != nil {
			return err
		}
	} else {
		var ready [1]byte
		if _, err := s.execCfgW.Read(ready[:]); err != nil {
			return fmt.Errorf("exec stage did not start: %w", err)
		}
	}
	if err := unix.Chdir(s.root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	s.proc = "/proc"
	if s.cfg.ReadOnlyRoot {
		if err := unix.MountSetattr(-1, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("read-only root: %w", err)
		}
	}
	return nil
}
