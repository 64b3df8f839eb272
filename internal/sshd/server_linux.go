package sshd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// handshakeTimeout bounds a connection's key exchange and login.
const handshakeTimeout = 20 * time.Second

// maxConns bounds the connections served at once: the port is on the
// host's loopback, where any local user can connect, and each connection
// costs a goroutine and a handshake until it authenticates or times out.
const maxConns = 64

// Options are what a Server needs of its sandbox.
type Options struct {
	// Sandbox is the sandbox's name (audit entries).
	Sandbox string
	// User is the login name, and the principal a certificate must name.
	User string
	// CA verifies client certificates; HostKey is the server's key.
	CA      ssh.PublicKey
	HostKey ssh.Signer
	// Dial opens a connection to the sandbox's agent: each session's
	// command runs over one of its own, closed (and the command killed)
	// when the session ends.
	Dial func() (*agent.Client, error)
	// FS is the sandbox's files (sftp).
	FS *agent.FS
	// DialPort connects to a port on the sandbox's loopback, from inside
	// its network namespace (direct-tcpip); nil refuses forwarding.
	DialPort func(port uint16) (*os.File, error)
	// Check applies the sandbox's command rules to a command's argv.
	Check func(args []string) error
	// ExecUser is the user commands run as ("" the sandbox's default),
	// Shell the login shell ("" for /bin/sh).
	ExecUser string
	Shell    string
	// Audit records an entry (nil: none).
	Audit func(audit.Entry)
	// Logf reports what a client is not told (nil: nothing).
	Logf func(format string, args ...any)
}

// Server is an SSH server for one sandbox.
type Server struct {
	o   Options
	cfg *ssh.ServerConfig

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New returns a server; Serve starts it.
func New(o Options) (*Server, error) {
	if o.CA == nil || o.HostKey == nil || o.User == "" || o.Dial == nil {
		return nil, errors.New("sshd: CA, host key, user and agent dial are required")
	}
	if o.Shell == "" {
		o.Shell = "/bin/sh"
	}
	s := &Server{o: o, conns: map[net.Conn]struct{}{}}
	ca := o.CA.Marshal()
	checker := &ssh.CertChecker{
		IsUserAuthority: func(auth ssh.PublicKey) bool { return bytes.Equal(auth.Marshal(), ca) },
		// No UserKeyFallback: a plain key is refused.
	}
	s.cfg = &ssh.ServerConfig{
		MaxAuthTries: 6,
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if meta.User() != o.User {
				return nil, fmt.Errorf("user %q: this sandbox is reached as %q", meta.User(), o.User)
			}
			cert, ok := key.(*ssh.Certificate)
			if !ok {
				return nil, errors.New("only certificates of this sandbox's CA are accepted")
			}
			if cert.CertType != ssh.UserCert {
				return nil, errors.New("not a user certificate")
			}
			perms, err := checker.Authenticate(meta, key)
			if err != nil {
				return nil, err
			}
			ext := map[string]string{"fingerprint": ssh.FingerprintSHA256(cert), "key-id": cert.KeyId}
			for k, v := range perms.Extensions {
				if k == "permit-pty" || k == "permit-port-forwarding" {
					ext[k] = v
				}
			}
			return &ssh.Permissions{Extensions: ext}, nil
		},
		ServerVersion: "SSH-2.0-agentkernel",
	}
	s.cfg.AddHostKey(o.HostKey)
	return s, nil
}

// Serve accepts connections on ln until it is closed (Close).
func (s *Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if !s.track(c) {
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			s.serveConn(c)
		}()
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.conns) >= maxConns {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// Close ends every connection and waits for their goroutines (the
// listener is the caller's to close).
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) logf(format string, args ...any) {
	if s.o.Logf != nil {
		s.o.Logf(format, args...)
	}
}

func (s *Server) audit(e audit.Entry) {
	if s.o.Audit != nil {
		e.Sandbox = s.o.Sandbox
		s.o.Audit(e)
	}
}

// serveConn runs one client connection.
func (s *Server) serveConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		s.logf("ssh: %s: %v", c.RemoteAddr(), err)
		return
	}
	_ = c.SetDeadline(time.Time{})
	defer sc.Close()
	start := time.Now()
	fp := sc.Permissions.Extensions["fingerprint"]
	who := fmt.Sprintf("ssh %s@%s cert %s", sc.User(), c.RemoteAddr(), fp)
	s.audit(audit.Entry{Action: audit.ActionSSHConnected, Who: who, User: sc.User(), CertFingerprint: fp})
	var recording atomic.Pointer[string]
	defer func() {
		d := time.Since(start)
		e := audit.Entry{Action: audit.ActionSSHDisconnected, Who: who, User: sc.User(), CertFingerprint: fp,
			DurationMS: float64(d.Microseconds()) / 1000, DurationSecs: d.Seconds()}
		if r := recording.Load(); r != nil {
			e.Recording = *r
		}
		s.audit(e)
	}()
	// Global requests (tcpip-forward for -R, keepalives) are all
	// answered no.
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.session(sc, who, ch, creqs, &recording)
			}()
		case "direct-tcpip":
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.directTCPIP(sc, nc)
			}()
		default:
			_ = nc.Reject(ssh.UnknownChannelType, "channel type "+strconv.Quote(nc.ChannelType())+" is not served here")
		}
	}
	wg.Wait()
}

// directTCPIP serves ssh -L: a connection to a port of the sandbox's own
// loopback, made inside its network namespace. Any other destination is
// refused: the host's loopback and networks are never reached from here.
func (s *Server) directTCPIP(sc *ssh.ServerConn, nc ssh.NewChannel) {
	var p struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	if _, ok := sc.Permissions.Extensions["permit-port-forwarding"]; !ok || s.o.DialPort == nil {
		_ = nc.Reject(ssh.Prohibited, "port forwarding is not permitted")
		return
	}
	switch strings.ToLower(p.Host) {
	case "localhost", "127.0.0.1", "::1", "ip6-localhost":
	default:
		_ = nc.Reject(ssh.Prohibited, "only the sandbox's own loopback can be forwarded to (localhost:PORT)")
		return
	}
	if p.Port == 0 || p.Port > 65535 {
		_ = nc.Reject(ssh.ConnectionFailed, "bad port")
		return
	}
	f, err := s.o.DialPort(uint16(p.Port))
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	defer conn.Close()
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(ch, conn)
		_ = ch.CloseWrite()
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(conn, ch)
		if tc, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// session state of one "session" channel.
type session struct {
	s      *Server
	sc     *ssh.ServerConn
	who    string
	ch     ssh.Channel
	env    []string
	term   string
	ws     *pty.Winsize
	master *os.File
	sigs   chan os.Signal
	// started is set once a shell, exec or subsystem runs.
	started bool
	// recording is the connection's recording file, as the client
	// ('agentkernel ssh connect --record') said (RecordingEnv).
	recording *atomic.Pointer[string]

	// client is the running command's agent connection: closing it
	// kills the command (the channel was closed under it).
	mu     sync.Mutex
	client *agent.Client
	gone   bool
}

// setClient records c as the running command's connection; false when
// the channel is already gone.
func (ss *session) setClient(c *agent.Client) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.client = c
	return !ss.gone
}

// hangUp kills the running command, if any, by closing its connection.
func (ss *session) hangUp() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.gone = true
	if ss.client != nil {
		ss.client.Close()
	}
}

// session serves one session channel: its requests until the command
// (or subsystem) it starts has ended.
func (s *Server) session(sc *ssh.ServerConn, who string, ch ssh.Channel, reqs <-chan *ssh.Request, recording *atomic.Pointer[string]) {
	ss := &session{s: s, sc: sc, who: who, ch: ch, sigs: make(chan os.Signal, 8), recording: recording}
	done := make(chan struct{})
	defer func() {
		<-done
		if ss.master != nil {
			ss.master.Close()
		}
		ch.Close()
	}()
	var once sync.Once
	finish := func() { once.Do(func() { close(done) }) }
	defer finish()
	for req := range reqs {
		ok := false
		switch req.Type {
		case "pty-req":
			ok = ss.ptyReq(req.Payload)
		case "window-change":
			ok = ss.windowChange(req.Payload)
		case "env":
			ok = ss.setEnv(req.Payload)
		case "signal":
			ok = ss.signal(req.Payload)
		case "shell", "exec", "subsystem":
			if ss.started {
				break
			}
			var run func()
			run, ok = ss.prepare(req.Type, req.Payload)
			if ok {
				ss.started = true
				if req.WantReply {
					_ = req.Reply(true, nil)
				}
				go func() {
					defer finish()
					run()
					// As sshd does: exit-status, EOF, then close; the
					// client waits for the close.
					ch.Close()
				}()
				continue
			}
		}
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
	// The client closed the channel (or the connection ended): a command
	// still running loses its agent connection, and the agent kills it.
	ss.hangUp()
	if !ss.started {
		finish()
	}
}

func (ss *session) ptyReq(b []byte) bool {
	var p struct {
		Term          string
		Cols, Rows    uint32
		Width, Height uint32
		Modes         string
	}
	if ss.started || ss.master != nil || ssh.Unmarshal(b, &p) != nil {
		return false
	}
	if _, ok := ss.sc.Permissions.Extensions["permit-pty"]; !ok {
		return false
	}
	ss.term = p.Term
	ss.ws = &pty.Winsize{Cols: clamp16(p.Cols), Rows: clamp16(p.Rows)}
	return true
}

func clamp16(v uint32) uint16 {
	if v > 0xffff {
		return 0xffff
	}
	return uint16(v)
}

func (ss *session) windowChange(b []byte) bool {
	var p struct {
		Cols, Rows    uint32
		Width, Height uint32
	}
	if ssh.Unmarshal(b, &p) != nil || ss.ws == nil {
		return false
	}
	ss.ws = &pty.Winsize{Cols: clamp16(p.Cols), Rows: clamp16(p.Rows)}
	if ss.master != nil {
		_ = pty.Setsize(ss.master, ss.ws)
	}
	return true
}

// RecordingEnv is the variable by which 'agentkernel ssh connect
// --record' names its recording file, for the connection's
// ssh_disconnected audit entry; it never reaches the command.
const RecordingEnv = "AGENTKERNEL_RECORDING"

// setEnv accepts the locale variables OpenSSH's clients send by default
// (SendEnv LANG LC_*); nothing else is taken from the client but
// RecordingEnv, which is kept for the audit log.
func (ss *session) setEnv(b []byte) bool {
	var p struct{ Name, Value string }
	if ssh.Unmarshal(b, &p) != nil {
		return false
	}
	if p.Name == RecordingEnv {
		if len(p.Value) > 4096 || strings.IndexFunc(p.Value, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return false
		}
		v := p.Value
		ss.recording.Store(&v)
		return true
	}
	if p.Name != "LANG" && !strings.HasPrefix(p.Name, "LC_") || strings.ContainsAny(p.Name, "=\x00") || strings.ContainsRune(p.Value, 0) || len(ss.env) >= 32 {
		return false
	}
	ss.env = append(ss.env, p.Name+"="+p.Value)
	return true
}

var signals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE, "HUP": syscall.SIGHUP,
	"ILL": syscall.SIGILL, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT, "SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

func (ss *session) signal(b []byte) bool {
	var p struct{ Name string }
	if ssh.Unmarshal(b, &p) != nil {
		return false
	}
	sig, ok := signals[p.Name]
	if !ok {
		return false
	}
	select {
	case ss.sigs <- sig:
		return true
	default:
		return false
	}
}

// prepare checks a shell, exec or subsystem request and returns what
// runs it.
func (ss *session) prepare(kind string, payload []byte) (func(), bool) {
	switch kind {
	case "subsystem":
		var p struct{ Name string }
		if ssh.Unmarshal(payload, &p) != nil || p.Name != "sftp" || ss.s.o.FS == nil {
			return nil, false
		}
		return func() { ss.sftp() }, true
	case "exec":
		var p struct{ Command string }
		if ssh.Unmarshal(payload, &p) != nil || strings.ContainsRune(p.Command, 0) {
			return nil, false
		}
		return func() { ss.run([]string{ss.s.o.Shell, "-c", p.Command}, p.Command) }, true
	default:
		return func() { ss.run([]string{ss.s.o.Shell}, "") }, true
	}
}

// exit reports a command's end to the client and closes the channel's
// sending side.
func (ss *session) exit(ws syscall.WaitStatus) {
	if ws.Signaled() {
		name := "KILL"
		for n, s := range signals {
			if s == ws.Signal() {
				name = n
			}
		}
		_, _ = ss.ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Name       string
			CoreDumped bool
			Msg, Lang  string
		}{name, ws.CoreDump(), "", ""}))
	} else {
		_, _ = ss.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(ws.ExitStatus())}))
	}
	_ = ss.ch.CloseWrite()
}

// fail tells the client why its command did not start, and ends it
// with status code.
func (ss *session) fail(code int, format string, args ...any) {
	fmt.Fprintf(ss.ch.Stderr(), "agentkernel: "+format+"\r\n", args...)
	ss.exit(syscall.WaitStatus(code << 8))
}

// run runs args in the sandbox with the session's stdio (a terminal of
// the sandbox after pty-req), passes signals and resizes on, and reports
// how it ended. cmd is the command line as the client sent it ("" for a
// shell).
func (ss *session) run(args []string, cmd string) {
	checked := args
	if cmd != "" {
		if f := strings.Fields(cmd); len(f) > 0 {
			checked = f
		}
	}
	if ss.s.o.Check != nil {
		if err := ss.s.o.Check(checked); err != nil {
			ss.s.audit(audit.Entry{Action: audit.ActionExec, Command: args, Who: ss.who, Error: err.Error()})
			ss.fail(126, "%v", err)
			return
		}
	}
	c, err := ss.s.o.Dial()
	if err != nil {
		ss.fail(125, "the sandbox's agent: %v", err)
		return
	}
	defer c.Close()
	if !ss.setClient(c) {
		return
	}
	req := agent.ExecRequest{Args: args, Env: append([]string{}, ss.env...), User: ss.s.o.ExecUser}
	var stdin, stdout, stderr *os.File
	var copies sync.WaitGroup
	var closeAfter []*os.File
	if ss.ws != nil {
		master, slave, err := pty.Open()
		if err != nil {
			ss.fail(125, "a terminal: %v", err)
			return
		}
		// The sandbox's own pty does the line discipline: this one only
		// carries bytes, raw from the start.
		_, _ = term.MakeRaw(int(slave.Fd()))
		_ = pty.Setsize(master, ss.ws)
		ss.master = master
		req.TTY = true
		if ss.term != "" && !strings.ContainsRune(ss.term, 0) {
			req.Env = append(req.Env, "TERM="+ss.term)
		}
		stdin, stdout, stderr = slave, slave, slave
		closeAfter = append(closeAfter, slave)
		go agent.CopyToPTY(master, ss.ch, true)
		copies.Add(1)
		go func() { defer copies.Done(); _, _ = io.Copy(ss.ch, master) }()
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			ss.fail(125, "%v", err)
			return
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			ss.fail(125, "%v", err)
			return
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			outR.Close()
			outW.Close()
			ss.fail(125, "%v", err)
			return
		}
		stdin, stdout, stderr = inR, outW, errW
		closeAfter = append(closeAfter, inR, outW, errW)
		go func() { _, _ = io.Copy(inW, ss.ch); inW.Close() }()
		copies.Add(2)
		go func() { defer copies.Done(); _, _ = io.Copy(ss.ch, outR); outR.Close() }()
		go func() { defer copies.Done(); _, _ = io.Copy(ss.ch.Stderr(), errR); errR.Close() }()
	}
	start := time.Now()
	end, err := c.ExecEnd(context.Background(), req, stdin, stdout, stderr, ss.sigs)
	for _, f := range closeAfter {
		f.Close()
	}
	if err != nil {
		if ss.master != nil {
			ss.master.Close()
		}
		copies.Wait()
		code := 126
		if errors.Is(err, sandbox.ErrNotFound) {
			code = 127
		}
		ss.s.audit(audit.Entry{Action: audit.ActionExec, Command: args, Who: ss.who, Error: err.Error()})
		ss.fail(code, "%v", err)
		return
	}
	copies.Wait()
	ws := syscall.WaitStatus(end.Status)
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	d := time.Since(start)
	ss.s.audit(audit.Entry{Time: start.UTC(), Action: audit.ActionExec, Command: args, ExitCode: &code, Who: ss.who,
		DurationMS: float64(d.Microseconds()) / 1000})
	ss.exit(ws)
}
