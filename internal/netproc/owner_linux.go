package netproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stopWait is how long Close waits for the helper's report.
const stopWait = 2 * time.Second

// Proc is a running helper, seen from the sandbox's owner.
type Proc struct {
	cmd    *exec.Cmd
	sock   *os.File
	onDeny func(Denial)
	// dial and ports: the owner's side of published ports in proxy
	// mode (Config.Dial) and the sandbox ports it may dial; dialing
	// bounds the dials under way.
	dial    func(port uint16) (*os.File, error)
	ports   map[uint16]bool
	dialing chan struct{}

	ready    chan error // the helper's first answer
	report   chan Report
	exited   chan struct{}
	closeOne sync.Once
	result   Report
	err      error
}

// proxyEnv are the host's variables the helper honours for its own dials
// (upstream proxy chaining) and, where it injects secrets, for the trust
// store it verifies upstream servers against (the host's, as Go's
// crypto/x509 finds it: SSL_CERT_FILE, SSL_CERT_DIR, else the system's
// bundle); nothing else of the owner's environment reaches it.
var proxyEnv = []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR"}

// Start starts the helper exe (agentkernel-full) for one sandbox: tun is
// the sandbox's TUN device (or proxy socket, cfg.Mode), which the helper
// takes over (Start closes this copy). onDeny, when not nil, is called for each refusal as it
// happens, from a goroutine of Proc's. Start does not wait for the helper
// to be ready: packets the sandbox sends meanwhile wait in the device.
func Start(exe string, tun *os.File, cfg Config, onDeny func(Denial)) (*Proc, error) {
	defer tun.Close()
	if cfg.Mode == "" {
		cfg.Mode = ModeTUN
	}
	cfgMsg, err := json.Marshal(Message{Config: &cfg})
	if err != nil {
		return nil, err
	}
	if len(cfgMsg) > MaxMessage {
		return nil, errors.New("the network policy and secrets are too large for the network helper's configuration message")
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("network helper: %w", err)
	}
	// Our end is non-blocking, so that the runtime polls it and closing
	// it wakes the goroutine reading it.
	if err := unix.SetNonblock(sp[0], true); err != nil {
		unix.Close(sp[0])
		unix.Close(sp[1])
		return nil, fmt.Errorf("network helper: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(sp[0]), "netstack"), os.NewFile(uintptr(sp[1]), "netstack-helper")
	defer theirs.Close()
	if _, err := ours.Write(cfgMsg); err != nil {
		ours.Close()
		return nil, fmt.Errorf("network helper: %w", err)
	}
	// One P: the helper's goroutines (the device's reader, the stack's
	// processor, a connection's handler and copies) hand work to each
	// other on every packet, and with more Ps each hand-off wakes another
	// thread, which costs more than the work on a small VM. A sandbox's
	// network is then bounded to about one core of the host, which is
	// also the fair share of one sandbox's stack.
	env := []string{"GOMAXPROCS=1"}
	for _, k := range proxyEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{Argv0, cfg.SandboxID},
		Env:        env,
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{tun, theirs},
		// Its own process group: a terminal's ^C is the sandbox's
		// business, not the helper's; it ends when our end closes.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, fmt.Errorf("starting the network helper %s: %w", exe, err)
	}
	p := &Proc{cmd: cmd, sock: ours, onDeny: onDeny, ready: make(chan error, 1), report: make(chan Report, 1), exited: make(chan struct{})}
	if cfg.Mode == ModeProxy && cfg.Dial != nil {
		p.dial, p.ports, p.dialing = cfg.Dial, map[uint16]bool{}, make(chan struct{}, maxDials)
		for _, m := range cfg.Network.Ports {
			if m.Proto == "" || m.Proto == "tcp" {
				p.ports[m.SandboxPort] = true
			}
		}
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	go p.read()
	return p, nil
}

// read takes the helper's messages until its end closes.
func (p *Proc) read() {
	buf := make([]byte, MaxMessage)
	readied := false
	denied := 0
	defer func() {
		if !readied {
			p.ready <- errors.New("the network helper ended before it was ready")
		}
		close(p.report)
	}()
	for {
		n, err := p.sock.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var m Message
		if json.Unmarshal(buf[:n], &m) != nil {
			continue
		}
		switch {
		case m.Ready || m.Error != "":
			if !readied {
				readied = true
				if m.Error != "" {
					p.ready <- errors.New(m.Error)
				} else {
					p.ready <- nil
				}
			}
		case m.Deny != nil:
			// The helper reads what the sandbox sends: what it says is
			// bounded here, so that no sandbox (nor a helper it took
			// over) can fill the audit log.
			if p.onDeny != nil && denied < maxDenials {
				denied++
				p.onDeny(clip(*m.Deny))
			}
		case m.Dial != nil:
			p.serveDial(*m.Dial)
		case m.Report != nil:
			r := *m.Report
			if len(r.Denials) > maxDenials {
				r.Denials = r.Denials[:maxDenials]
			}
			for i := range r.Denials {
				r.Denials[i] = clip(r.Denials[i])
			}
			r.Summary = clipString(r.Summary, maxText)
			if len(r.Injections) > maxDenials {
				r.Injections = r.Injections[:maxDenials]
			}
			for i := range r.Injections {
				r.Injections[i].Key, r.Injections[i].Host = clipString(r.Injections[i].Key, 128), clipString(r.Injections[i].Host, 255)
			}
			p.report <- r
			return
		}
	}
}

// maxDials bounds the connections into the sandbox being made at once
// for a helper; a request beyond it is refused at once.
const maxDials = 16

// serveDial answers the helper's request for a connection to a
// published port, from a goroutine of its own: a port that is not
// published, or one asked for while maxDials others are under way, is
// refused.
func (p *Proc) serveDial(req DialRequest) {
	if p.dial == nil || !p.ports[req.Port] {
		p.answerDial(req.Seq, nil, fmt.Errorf("port %d is not published", req.Port))
		return
	}
	select {
	case p.dialing <- struct{}{}:
	default:
		p.answerDial(req.Seq, nil, errors.New("too many connections being made"))
		return
	}
	go func() {
		defer func() { <-p.dialing }()
		f, err := p.dial(req.Port)
		p.answerDial(req.Seq, f, err)
		if f != nil {
			f.Close()
		}
	}()
}

// answerDial sends a DialReply, with f as its descriptor when not nil.
// It never waits: an answer the helper's socket has no room for is
// dropped (the helper gives up on it), so that a helper that asks
// without reading cannot hold its owner up.
func (p *Proc) answerDial(seq uint64, f *os.File, err error) {
	r := DialReply{Seq: seq}
	if err != nil {
		r.Error = err.Error()
	}
	b, jerr := json.Marshal(Message{Dialed: &r})
	if jerr != nil {
		return
	}
	var oob []byte
	if f != nil && err == nil {
		oob = unix.UnixRights(int(f.Fd()))
	}
	rc, rerr := p.sock.SyscallConn()
	if rerr != nil {
		return
	}
	_ = rc.Write(func(fd uintptr) bool {
		_ = unix.Sendmsg(int(fd), b, oob, nil, unix.MSG_DONTWAIT)
		return true
	})
}

// Ready waits until the helper serves the sandbox (its published ports
// listen) and returns why not if it cannot.
func (p *Proc) Ready() error {
	err, ok := <-p.ready
	if !ok {
		return errors.New("the network helper ended before it was ready")
	}
	p.ready <- err // for the next caller
	return err
}

// Close stops the helper and returns its report. It is safe to call more
// than once.
func (p *Proc) Close() (Report, error) {
	p.closeOne.Do(func() {
		stop, _ := json.Marshal(Message{Stop: true})
		_ = p.sock.SetWriteDeadline(time.Now().Add(stopWait))
		_, _ = p.sock.Write(stop)
		select {
		case r, ok := <-p.report:
			if ok {
				p.result = r
			}
		case <-time.After(stopWait):
			p.err = errors.New("the network helper did not report")
		}
		p.sock.Close()
		select {
		case <-p.exited:
		case <-time.After(stopWait):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p.result, p.err
}

// Pid is the helper's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Abandon closes the owner's end of the socket without a word, as the
// owner's death would; the helper ends on its own.
func (p *Proc) Abandon() { p.sock.Close() }

// Bounds on what a helper reports: refusals told as they happen (each
// distinct one once) and in the report, and each text's length.
const (
	maxDenials = 1024
	maxText    = 1024
)

// clip bounds a refusal's texts.
func clip(d Denial) Denial {
	d.Kind, d.Name, d.Addr = clipString(d.Kind, 16), clipString(d.Name, 255), clipString(d.Addr, 64)
	d.Reason, d.Hint = clipString(d.Reason, maxText), clipString(d.Hint, maxText)
	return d
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
