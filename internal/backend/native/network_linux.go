package native

import (
	"context"
	"errors"

	"os"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/fullbin"
	"github.com/agentkernel/agentkernel/internal/netproc"
)

// startNetwork hands the sandbox's TUN device to a network helper
// (package netproc). The network stage calls it on the sandbox's thread,
// in the sandbox's namespaces: the helper is started from another
// goroutine (so from a thread in agentkernel's own namespaces). The
// command may start before the helper is ready: its first packets wait
// in the device. In proxy mode, ns (taken over; nil in TUN mode) is a
// handle on the sandbox's network namespace for its published ports
// (proxyDial).
func (r *runState) startNetwork(tun *os.File, mode netproc.Mode, ns *os.File) error {
	exe := r.netHelper
	if exe == "" {
		tun.Close()
		if ns != nil {
			ns.Close()
		}
		return errors.New("network egress needs agentkernel-full, which was not found")
	}
	cfg := netproc.Config{SandboxID: r.id, Network: r.spec.Network, Mode: mode, Inject: netproc.InjectConfig(r.spec.Secrets)}
	if mode == netproc.ModeProxy {
		r.warn(proxyNotice)
		if ns != nil && len(cfg.Network.Ports) > 0 {
			cfg.Dial = r.proxyDial(ns, os.Geteuid() != 0)
			ns = nil
		}
	}
	if ns != nil {
		ns.Close()
	}
	set := func(p netproc.Helper) {
		r.netMu.Lock()
		r.net = p
		r.netMu.Unlock()
	}
	if len(cfg.Network.Ports) == 0 && !r.persistent {
		// The helper starts when the sandbox first uses its network, from
		// a goroutine of its own (StartLazy): nothing is forked here.
		p, err := netproc.StartLazy(exe, tun, cfg, nil)
		if err == nil {
			set(p)
		}
		return err
	}
	var onDeny func(netproc.Denial)
	if f := r.b.opts.OnNetworkDeny; f != nil && r.persistent {
		onDeny = func(d netproc.Denial) { f(r.spec, d) }
	}
	// Published ports must listen from the start. Not forked on the
	// sandbox's thread: the helper must start in agentkernel's own
	// namespaces.
	started := make(chan error, 1)
	go func() {
		p, err := netproc.Start(exe, tun, cfg, onDeny)
		if err == nil {
			set(p)
		}
		started <- err
	}()
	return <-started
}

// proxyNotice is the one line a sandbox in proxy mode gets.
const proxyNotice = "network: /dev/net/tun cannot be opened here, so the sandbox reaches the network through an HTTP proxy (HTTP_PROXY=http://127.0.0.1:3128): programs that ignore the proxy variables get no network; published ports are forwarded to the sandbox's loopback (docs/network.md)"

// awaitNetwork starts the network helper with the device a re-executed
// init sends over sock (its network stage: 'N', the mode's letter and
// the descriptor), and closes done once it has (or the init ended
// without sending one). pid is the init's: in proxy mode its pidfd is
// the way into the sandbox's network namespace for published ports.
func (r *runState) awaitNetwork(sock *os.File, done chan<- struct{}, pid int) {
	defer close(done)
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), b[:], oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		fds, _ = unix.ParseUnixRights(&msgs[0])
	}
	if n != 2 || b[0] != 'N' || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		r.warn("network: unexpected message from the sandbox init")
		return
	}
	mode := netproc.ModeTUN
	var ns *os.File
	if b[1] == netproc.ModeProxy[0] {
		mode = netproc.ModeProxy
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			ns = os.NewFile(uintptr(fd), "sandbox pidfd")
		}
	}
	if err := r.startNetwork(os.NewFile(uintptr(fds[0]), "network"), mode, ns); err != nil {
		r.warn("network: " + err.Error())
	}
}

// findNetHelper finds the network helper's binary while this process
// still sees the host's files (before any stage runs).
func (r *runState) findNetHelper() {
	if r.netHelper = r.b.opts.NetHelper; r.netHelper == "" {
		r.netHelper, _ = fullbin.Path()
	}
}

// networkReady waits until the network helper serves the sandbox (its
// published ports listen), or says why not.
func (r *runState) networkReady(ctx context.Context) error {
	r.netMu.Lock()
	p := r.net
	r.netMu.Unlock()
	if p == nil {
		return nil
	}
	ready := make(chan error, 1)
	go func() { ready <- p.Ready() }()
	select {
	case err := <-ready:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopNetwork stops the sandbox's network helper, if it has one, and
// returns what its policy refused.
func (r *runState) stopNetwork() (netproc.Report, error) {
	r.netMu.Lock()
	p := r.net
	r.net = nil
	ns := r.netNS
	r.netNS = nil
	r.netMu.Unlock()
	if p == nil {
		if ns != nil {
			ns.close()
		}
		return netproc.Report{}, nil
	}
	rep, err := p.Close()
	if ns != nil {
		ns.close()
	}
	return rep, err
}
