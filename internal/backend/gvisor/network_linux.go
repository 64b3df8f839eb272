package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/fullbin"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A sandbox with egress or published ports gets the network native's
// sandboxes get, seen through gVisor's own stack:
//
//   - The run's locked thread unshares a network namespace of its own
//     (beside its mount namespace), brings lo up and makes the TUN
//     device eth0 there, addressed and routed as tundev.DefaultLayout
//     says (package tundev, native's own code).
//   - runsc runs with --network=sandbox in that namespace (config.json
//     names it through a bind mount of the thread's namespace in the
//     run's directory): it takes eth0's addresses and routes into the
//     Sentry's network stack and reads and writes the device's packets
//     through an AF_PACKET socket bound to it. On a TUN device those are
//     bare IP packets (no link address), which gVisor's link endpoint
//     handles as such. The host kernel's stack in that namespace never
//     sees a connection: runsc removes eth0's addresses from it.
//   - The other end of the device is the network helper (package
//     netproc: netstack and netpolicy), started as native starts it, so
//     that the policy (modes, allow-lists, refused address classes,
//     DNS, published ports) is the same code with the same decisions.
//   - /etc/resolv.conf and /etc/hosts are read-only files of the run's
//     directory bound over the image's: the resolver is the helper's.

// netNeeded reports whether spec's sandbox needs a network beyond
// loopback.
func netNeeded(spec *sandbox.Spec) bool {
	return spec.Network.Mode.Egress() || len(spec.Network.Ports) > 0
}

// tunName is the sandbox's network device, as native names it.
const tunName = "eth0"

// setupNetwork runs on the run's locked thread, after it has unshared
// its network namespace: lo up, the TUN device made and configured, the
// namespace bound where config.json names it, resolv.conf and hosts
// written. It returns the mounts to add to config.json; the device is
// kept in r.tun for startNetwork.
func (r *run) setupNetwork() ([]specs.Mount, error) {
	if err := prestart.LoopbackUp(); err != nil {
		return nil, fmt.Errorf("lo up in the sandbox's network namespace: %w", err)
	}
	dev, err := tundev.Open(tunName)
	if err != nil {
		return nil, fmt.Errorf("the gvisor backend's network needs a TUN device (/dev/net/tun): %w", err)
	}
	l := tundev.DefaultLayout()
	if err := tundev.Persist(dev); err != nil {
		dev.Close()
		return nil, err
	}
	if err := tundev.Configure(tunName, l); err != nil {
		dev.Close()
		return nil, err
	}
	r.tun = dev
	ns := r.netns()
	if err := os.WriteFile(ns, nil, 0o600); err != nil {
		return nil, err
	}
	if err := unix.Mount("/proc/thread-self/ns/net", ns, "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("binding the sandbox's network namespace: %w", err)
	}
	resolv := "# written by agentkernel: the sandbox's resolver applies its network policy\nnameserver " + l.DNS4.String() + "\n"
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + l.Addr4.Addr().String() + "\t" + r.spec.Hostname + "\n"
	if l.HasIPv6() {
		resolv += "nameserver " + l.DNS6.String() + "\n"
		hosts += l.Addr6.Addr().String() + "\t" + r.spec.Hostname + "\n"
	}
	var mounts []specs.Mount
	for _, f := range []struct{ name, body string }{{"resolv.conf", resolv}, {"hosts", hosts}} {
		src := r.dir + "/etc-" + f.name
		if err := os.WriteFile(src, []byte(f.body), 0o644); err != nil {
			return nil, err
		}
		if err := mountPointIn(r.rootfs(), "etc/"+f.name); err != nil {
			return nil, fmt.Errorf("the image has no /etc/%s to replace and it cannot be created: %w", f.name, err)
		}
		mounts = append(mounts, specs.Mount{Destination: "/etc/" + f.name, Type: "bind", Source: src, Options: []string{"rbind", "ro"}})
	}
	return mounts, nil
}

func (r *run) netns() string { return r.dir + "/netns" }

// mountPointIn makes sure name (relative, resolved inside root as the
// sandbox will resolve it) exists below root, creating it as an empty
// file (and its directory) where it is missing. root is the bundle's
// rootfs: the image's layers under the run's own writable layer.
func mountPointIn(root, name string) error {
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rootFd)
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT}
	if fd, err := unix.Openat2(rootFd, name, &how); err == nil {
		unix.Close(fd)
		return nil
	} else if !errors.Is(err, unix.ENOENT) {
		return err
	}
	dirHow := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	dfd, err := unix.Openat2(rootFd, dir, &dirHow)
	if errors.Is(err, unix.ENOENT) {
		dfd, err = mkdirAllIn(rootFd, dir)
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	// The file itself: never through a symbolic link (a dangling one
	// would be followed out of the image by the host's resolution).
	fd, err := unix.Openat(dfd, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// mkdirAllIn makes dir (relative) below the directory rootFd, one
// component at a time, each looked up inside the root (a link in the
// image resolves as the sandbox would see it, never to the host's
// paths), and returns an O_PATH descriptor of it.
func mkdirAllIn(rootFd int, dir string) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT}
	cur, err := unix.Openat2(rootFd, ".", &how)
	if err != nil {
		return -1, err
	}
	so := "."
	for _, c := range strings.Split(dir, "/") {
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			unix.Close(cur)
			return -1, fmt.Errorf("%q: a path with .. is refused", dir)
		}
		// c is one name: Mkdirat follows no link, and an existing one
		// (EEXIST) is resolved below, inside the root.
		if err := unix.Mkdirat(cur, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, err
		}
		unix.Close(cur)
		so += "/" + c
		if cur, err = unix.Openat2(rootFd, so, &how); err != nil {
			return -1, err
		}
	}
	return cur, nil
}

// startNetwork hands the TUN device to a network helper. Runs on the
// run's locked thread, in the sandbox's network namespace: the helper
// itself is forked from another goroutine (so another thread, in
// agentkernel's own namespaces), as native forks it. A run without
// published ports starts it on the sandbox's first packet (StartLazy); a
// persistent sandbox's refusals reach Options.OnNetworkDeny as they
// happen.
func (r *run) startNetwork() error {
	tun := r.tun
	r.tun = nil
	exe := r.b.opts.NetHelper
	if exe == "" {
		var err error
		if exe, err = fullbin.Path(); err != nil {
			tun.Close()
			return fmt.Errorf("network egress needs agentkernel-full: %w", err)
		}
	}
	// The secrets' values and the CA's key: a persistent sandbox's, as
	// its supervisor resolved them for this boot.
	cfg := netproc.Config{SandboxID: r.id, Mode: netproc.ModeTUN, Network: r.spec.Network, Inject: netproc.InjectConfig(r.spec.Secrets)}
	var onDeny func(netproc.Denial)
	if f := r.b.opts.OnNetworkDeny; f != nil && r.keep != "" {
		onDeny = func(d netproc.Denial) { f(r.spec, d) }
	}
	if len(cfg.Network.Ports) == 0 && r.keep == "" {
		p, err := netproc.StartLazy(exe, tun, cfg, nil)
		if err != nil {
			return err
		}
		r.net = p
		return nil
	}
	type out struct {
		p   *netproc.Proc
		err error
	}
	started := make(chan out, 1)
	go func() {
		p, err := netproc.Start(exe, tun, cfg, onDeny)
		started <- out{p, err}
	}()
	o := <-started
	if o.err != nil {
		return o.err
	}
	r.net = o.p
	// Published ports listen before the command starts.
	return o.p.Ready()
}

// stopNetwork ends the run's network helper, if it has one, and puts
// what its policy refused in res.
func (r *run) stopNetwork(res *sandbox.Result) error {
	if r.tun != nil {
		r.tun.Close()
		r.tun = nil
	}
	if r.net == nil {
		return nil
	}
	rep, err := r.net.Close()
	r.net = nil
	if res != nil {
		res.NetworkDenials, res.NetworkSummary = rep.Denials, rep.Summary
		res.SecretInjections = rep.Injections
	}
	return err
}
