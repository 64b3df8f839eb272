package helper

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/netpolicy"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Main serves one sandbox until its owner stops it or goes away, and
// returns the process's exit status. confine loads the process's seccomp
// filter on every thread (native.ConfineProcess, passed in by the binary:
// the backend imports this package's caller, not the other way round);
// Main refuses to serve without it.
func Main(confine func() error) int {
	sock := os.NewFile(netproc.SocketFD, "owner")
	if sock == nil {
		fmt.Fprintln(os.Stderr, "agentkernel network helper: started without its owner's socket; it is not a command to run by hand")
		return 2
	}
	send := func(m netproc.Message) {
		b, err := json.Marshal(m)
		if err == nil {
			_, _ = sock.Write(b)
		}
	}
	fail := func(err error) int {
		send(netproc.Message{Error: err.Error()})
		return 1
	}
	buf := make([]byte, netproc.MaxMessage)
	n, err := sock.Read(buf)
	if err != nil {
		return fail(fmt.Errorf("network helper: reading its configuration: %w", err))
	}
	var m netproc.Message
	if err := json.Unmarshal(buf[:n], &m); err != nil || m.Config == nil {
		return fail(fmt.Errorf("network helper: bad configuration"))
	}
	cfg := m.Config
	unix.CloseOnExec(netproc.DeviceFD)
	unix.CloseOnExec(netproc.SocketFD)
	tun := os.NewFile(netproc.DeviceFD, "tun")

	opts := netpolicy.Options{
		OnDeny: func(d netpolicy.Denial) {
			w := wire(netpolicy.DenialCount{Denial: d, Count: 1})
			send(netproc.Message{Deny: &w})
		},
	}
	inj := &injections{counts: map[[2]string]int{}}
	if cfg.Inject != nil {
		in, err := injection(cfg.Inject)
		if err != nil {
			tun.Close()
			return fail(err)
		}
		opts.Inject, opts.OnInject = in, inj.add
	}
	engine, err := netpolicy.Compile(cfg.Network, opts)
	cfg.Inject = nil // the values live in the engine only
	if err != nil {
		tun.Close()
		return fail(err)
	}
	defer engine.Close()
	var st *netstack.Stack
	var serve func()        // starts reading what the sandbox sends
	var dialer *ownerDialer // proxy mode: connections to published ports
	var published atomic.Uint64
	switch cfg.Mode {
	case netproc.ModeProxy:
		// No TUN: the sandbox's programs reach the network through the
		// proxy listening inside it, and published ports reach the
		// sandbox through connections its owner makes inside it.
		ln, err := net.FileListener(tun)
		tun.Close()
		if err != nil {
			return fail(fmt.Errorf("network helper: the proxy's socket: %w", err))
		}
		var pubs []*proxyPublication
		for _, p := range cfg.Network.Ports {
			pub, err := publishProxied(p)
			if err != nil {
				ln.Close()
				for _, q := range pubs {
					q.Close()
				}
				return fail(err)
			}
			pubs = append(pubs, pub)
			defer pub.Close()
		}
		dialer = newOwnerDialer(send)
		serve = func() {
			go func() { _ = engine.ServeProxy(ln) }()
			for i, pub := range pubs {
				pub.serve(cfg.Network.Ports[i].SandboxPort, dialer.dial, func() { published.Add(1) })
			}
		}
	default:
		st, err = netstack.New(netstack.Config{TUN: tun, Handler: engine, Held: true})
		if err != nil {
			return fail(fmt.Errorf("network stack: %w", err))
		}
		defer st.Close()
		for _, p := range cfg.Network.Ports {
			c, err := st.Publish(p)
			if err != nil {
				return fail(fmt.Errorf("publishing %s: %w", p, err))
			}
			defer c.Close()
		}
		serve = st.Start
	}
	// From here on the helper reads what the sandbox sends: it keeps no
	// privilege to lose, and a seccomp filter keeps it from the kernel's
	// administrative calls (namespaces, mounts, bpf, keyrings, ptrace).
	if err := dropPrivileges(); err != nil {
		return fail(fmt.Errorf("network helper: dropping privileges: %w", err))
	}
	if confine == nil {
		return fail(fmt.Errorf("network helper: no seccomp filter to load"))
	}
	if err := confine(); err != nil {
		return fail(fmt.Errorf("network helper: %w", err))
	}
	serve()
	send(netproc.Message{Ready: true})

	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		m, fds, err := readOwner(netproc.SocketFD, buf, oob)
		if err != nil {
			if dialer != nil {
				dialer.close()
			}
			return 0 // the owner is gone
		}
		if m.Dialed != nil && dialer != nil {
			dialer.deliver(*m.Dialed, fds)
			continue
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		if m.Stop {
			break
		}
	}
	if dialer != nil {
		dialer.close()
	}
	rep := report(engine, st)
	if st == nil {
		rep.Counters["published"] = published.Load()
	}
	rep.Injections = inj.list()
	send(netproc.Message{Report: &rep})
	return 0
}

// report is the helper's last word: the refusals and the counters.
func report(e *netpolicy.Engine, st *netstack.Stack) netproc.Report {
	var rep netproc.Report
	for _, d := range e.Denials() {
		rep.Denials = append(rep.Denials, wire(d))
	}
	rep.Summary = e.Summary()
	s := e.Stats()
	var m netstack.Metrics
	if st != nil {
		m = st.Metrics()
	}
	rep.Counters = map[string]uint64{
		"dns_queries":   s.DNSQueries,
		"dns_errors":    s.DNSErrors,
		"dial_errors":   s.DialErrors,
		"tcp_accepted":  m.TCPAccepted,
		"tcp_rejected":  m.TCPRejected,
		"udp_flows":     m.UDPFlows,
		"udp_refused":   m.UDPRefused,
		"rx_bytes":      m.RxBytes,
		"tx_bytes":      m.TxBytes,
		"published":     m.Published,
		"rx_packets":    m.RxPackets,
		"tx_packets":    m.TxPackets,
		"dns_dropped":   s.DNSDroppedRecords,
		"names_tracked": uint64(s.Names),
	}
	if s.Injected > 0 || s.SecretRefused > 0 {
		rep.Counters["secrets_injected"] = s.Injected
		rep.Counters["secrets_refused"] = s.SecretRefused
	}
	for k, v := range s.Allowed {
		rep.Counters["allowed_"+k] = v
	}
	for k, v := range s.Denied {
		rep.Counters["denied_"+k] = v
	}
	return rep
}

// injection is the engine's secret injection from the owner's
// configuration: the sandbox's CA (certificate and key) and the bindings.
// Upstream servers are verified against the host's trust store
// (Injection.Roots nil: crypto/x509's system pool, which honours the
// SSL_CERT_FILE and SSL_CERT_DIR the owner passed on), read before the
// helper serves.
func injection(c *netproc.Inject) (*netpolicy.Injection, error) {
	ca, err := tls.X509KeyPair(c.CACert, c.CAKey)
	if err != nil {
		return nil, fmt.Errorf("secret injection: the sandbox's CA: %w", err)
	}
	in := &netpolicy.Injection{CA: ca}
	for _, s := range c.Secrets {
		in.Bindings = append(in.Bindings, netpolicy.Binding{Key: s.Key, Host: s.Host, Header: s.Header, Value: s.Value})
	}
	return in, nil
}

// injections counts the requests each secret was added to, by host (the
// engine's OnInject, which must not block).
type injections struct {
	mu     sync.Mutex
	counts map[[2]string]int
}

func (i *injections) add(key, host string) {
	i.mu.Lock()
	i.counts[[2]string{key, host}]++
	i.mu.Unlock()
}

func (i *injections) list() []netproc.Injection {
	i.mu.Lock()
	defer i.mu.Unlock()
	var out []netproc.Injection
	for k, n := range i.counts {
		out = append(out, netproc.Injection{Key: k[0], Host: k[1], Count: n})
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Key != out[b].Key {
			return out[a].Key < out[b].Key
		}
		return out[a].Host < out[b].Host
	})
	return out
}

// wire is a refusal as the owner gets it.
func wire(d netpolicy.DenialCount) netproc.Denial {
	w := sandbox.NetworkDenial{Kind: d.Kind, Name: d.Name, Reason: d.Reason, Hint: d.Allow, Count: int(min(d.Count, 1<<31-1))}
	if d.Addr.IsValid() {
		w.Addr = d.Addr.String()
		if d.Addr.Port() == 0 {
			w.Addr = d.Addr.Addr().String()
		}
	}
	return w
}

// nobody is the uid and gid a helper started by root runs as once it
// serves the sandbox.
const nobody = 65534

// dropPrivileges leaves every thread of the helper with no capability
// (bounding, effective, permitted, inheritable, ambient), no way to gain
// one and, started by root, the ids of nobody. Capabilities and no_new_privs belong to threads, so each step
// runs on all of them (syscall.AllThreadsSyscall).
func dropPrivileges() error {
	all := func(trap, a1, a2 uintptr) error {
		if _, _, e := syscall.AllThreadsSyscall(trap, a1, a2, 0); e != 0 {
			return e
		}
		return nil
	}
	if err := all(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return err
	}
	if _, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 && e != unix.EINVAL {
		return e
	}
	for c := uintptr(0); c <= 63; c++ {
		if err := all(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c); err != nil {
			if err == unix.EINVAL {
				break // past the last capability the kernel knows
			}
			if err == unix.EPERM && os.Geteuid() != 0 {
				// Not root: without CAP_SETPCAP the bounding set stays,
				// but nothing can be gained through it (no_new_privs, and
				// the other sets are cleared below).
				break
			}
			return err
		}
	}
	if os.Geteuid() == 0 {
		// Root without capabilities still owns most of the host's files:
		// the helper becomes nobody (every thread: Go's Setres*id and
		// Setgroups apply to all of them), which owns none.
		if err := syscall.Setgroups(nil); err != nil {
			return err
		}
		if err := syscall.Setresgid(nobody, nobody, nobody); err != nil {
			return err
		}
		if err := syscall.Setresuid(nobody, nobody, nobody); err != nil {
			return err
		}
	}
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return e
	}
	return nil
}
