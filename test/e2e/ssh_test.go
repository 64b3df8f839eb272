//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh"

	"github.com/agentkernel/agentkernel/internal/sshd"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// sshClients are the OpenSSH programs the SSH tests drive.
func sshClients(t *testing.T) {
	t.Helper()
	for _, p := range []string{"ssh", "sftp", "scp"} {
		if _, err := exec.LookPath(p); err != nil {
			testenv.Missing(t, "OpenSSH's %s (apt install openssh-client)", p)
		}
	}
}

// sshSandbox creates and starts a sandbox with --ssh and writes its
// 'ssh config' to a file; it returns the file.
func sshSandbox(t *testing.T, a *ak, ref, name string) string {
	t.Helper()
	a.must("sandbox", "create", name, "--image", ref, "--ssh", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", name) })
	r := a.must("ssh", "config", name)
	if !strings.Contains(r.stdout, "Host agentkernel-"+name+"\n") || !strings.Contains(r.stdout, "StrictHostKeyChecking yes") {
		t.Fatalf("ssh config: %v", r)
	}
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(cfg, []byte(r.stdout+"  LogLevel ERROR\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// openssh runs one of OpenSSH's programs with a timeout.
func openssh(t *testing.T, stdin string, prog string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, prog, args...)
	c.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", prog, args, err)
	}
	return r
}

// sshAuditEntry is the part of an audit entry the SSH tests read.
type sshAuditEntry struct {
	Sandbox         string   `json:"sandbox"`
	Action          string   `json:"action"`
	Command         []string `json:"command"`
	ExitCode        *int     `json:"exit_code"`
	Who             string   `json:"who"`
	User            string   `json:"user"`
	CertFingerprint string   `json:"cert_fingerprint"`
	DurationSecs    float64  `json:"duration_secs"`
	Recording       string   `json:"recording"`
}

// TestSSHOpenSSHClients: a sandbox created with --ssh is reached by
// OpenSSH's ssh (a command, a VS Code-style 'ssh -T host CMD', a pty),
// sftp, scp and ssh -L, through 'ssh connect' and 'ssh config'; exit
// codes come through; each connection is audited.
func TestSSHOpenSSHClients(t *testing.T) {
	sshClients(t)
	a, ref := withRegistry(t)
	cfg := sshSandbox(t, a, ref, "sshbox")
	host := "agentkernel-sshbox"

	// ssh connect, with a command: its output and exit code.
	if r := a.run("ssh", "connect", "sshbox", "--", "cat", "/etc/agentkernel-test"); r.code != 0 || r.stdout != "registry\n" {
		t.Fatalf("ssh connect -- cat: %v", r)
	}
	if r := a.run("ssh", "connect", "sshbox", "--", "sh", "-c", "echo 'it''s quoted' \"$0\"; exit 7", "a b"); r.code != 7 || r.stdout != "its quoted a b\n" {
		t.Fatalf("ssh connect, exit code and quoting: %v", r)
	}
	// Its client key is gone after the connection.
	keys, _ := filepath.Glob(filepath.Join(a.dataDir, "sandboxes", "sshbox", "ssh", "connect-*"))
	if len(keys) != 0 {
		t.Errorf("ssh connect left its client keys: %v", keys)
	}
	// --print: the command line, which works as printed.
	r := a.must("ssh", "connect", "sshbox", "--print")
	if !strings.HasPrefix(r.stdout, "ssh -i ") || !strings.Contains(r.stdout, "StrictHostKeyChecking=yes") {
		t.Fatalf("ssh connect --print: %v", r)
	}
	if r := openssh(t, "", "sh", "-c", strings.TrimSpace(r.stdout)+" -o LogLevel=ERROR -T -- echo printed"); r.code != 0 || r.stdout != "printed\n" {
		t.Fatalf("the printed command: %v", r)
	}

	// An IDE's way: ssh -T host CMD, stdin piped to the command.
	if r := openssh(t, "line one\nline two\n", "ssh", "-F", cfg, "-T", host, "wc -l; id -u"); r.code != 0 || r.stdout != "2\n0\n" {
		t.Fatalf("ssh -T host CMD: %v", r)
	}
	// A terminal: the sandbox's own pty, its size as the client asked.
	if r := openssh(t, "", "ssh", "-F", cfg, "-tt", host, "tty; stty size"); r.code != 0 || !strings.Contains(r.stdout, "/dev/pts/") {
		t.Fatalf("ssh -tt: %v", r)
	}
	// A login shell reading its commands from stdin.
	if r := openssh(t, "echo from-shell\nexit 3\n", "ssh", "-F", cfg, "-T", host); r.code != 3 || !strings.Contains(r.stdout, "from-shell") {
		t.Fatalf("ssh shell: %v", r)
	}

	// An interactive shell under a real terminal: its prompt, the
	// window's size, a resize followed, and its end.
	c := exec.Command("ssh", "-F", cfg, "-tt", host)
	tty, err := pty.StartWithSize(c, &pty.Winsize{Cols: 101, Rows: 33})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	expect := func(want string) {
		t.Helper()
		var seen []byte
		buf := make([]byte, 4096)
		tty.SetReadDeadline(time.Now().Add(15 * time.Second))
		for !bytes.Contains(seen, []byte(want)) {
			k, err := tty.Read(buf)
			seen = append(seen, buf[:k]...)
			if err != nil {
				t.Fatalf("waiting for %q: %v; the terminal showed %q", want, err, seen)
			}
		}
	}
	expect("# ")
	tty.Write([]byte("stty size\n"))
	expect("33 101")
	pty.Setsize(tty, &pty.Winsize{Cols: 120, Rows: 40})
	time.Sleep(300 * time.Millisecond)
	tty.Write([]byte("stty size\n"))
	expect("40 120")
	tty.Write([]byte("exit 4\n"))
	if err := c.Wait(); c.ProcessState == nil || c.ProcessState.ExitCode() != 4 {
		t.Errorf("the interactive shell's end: %v", err)
	}

	// sftp: put, get, mkdir, rename, ls.
	work := t.TempDir()
	local := filepath.Join(work, "up.txt")
	payload := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 KB
	os.WriteFile(local, payload, 0o644)
	batch := filepath.Join(work, "batch")
	os.WriteFile(batch, []byte(fmt.Sprintf("mkdir /tmp/d\nput %s /tmp/d/up.txt\nrename /tmp/d/up.txt /tmp/d/moved.txt\nchmod 600 /tmp/d/moved.txt\nls -l /tmp/d\nget /etc/agentkernel-test %s\n", local, filepath.Join(work, "got"))), 0o644)
	if r := openssh(t, "", "sftp", "-F", cfg, "-b", batch, host); r.code != 0 || !strings.Contains(r.stdout, "moved.txt") {
		t.Fatalf("sftp: %v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "got")); string(b) != "registry\n" {
		t.Errorf("sftp get: %q", b)
	}
	if r := a.must("exec", "sshbox", "--", "sh", "-c", "md5sum < /tmp/d/moved.txt; stat -c '%a %u' /tmp/d/moved.txt"); !strings.Contains(r.stdout, "600 0") {
		t.Errorf("sftp put, in the sandbox: %v", r)
	}
	// scp (OpenSSH 9: the sftp protocol) both ways.
	if r := openssh(t, "", "scp", "-F", cfg, local, host+":/tmp/scp.txt"); r.code != 0 {
		t.Fatalf("scp to: %v", r)
	}
	back := filepath.Join(work, "back.txt")
	if r := openssh(t, "", "scp", "-F", cfg, host+":/tmp/scp.txt", back); r.code != 0 {
		t.Fatalf("scp from: %v", r)
	}
	if b, _ := os.ReadFile(back); !bytes.Equal(b, payload) {
		t.Errorf("scp round trip: %d bytes, want %d", len(b), len(payload))
	}

	// ssh -L to a server on the sandbox's loopback.
	a.must("exec", "sshbox", "--", "sh", "-c", "mkdir -p /tmp/www && echo served-inside > /tmp/www/index.html")
	a.must("exec", "-d", "sshbox", "--", "httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/tmp/www")
	lport := freeHostPort(t)
	fwd := exec.Command("ssh", "-F", cfg, "-N", "-o", "ExitOnForwardFailure=yes", "-L", fmt.Sprintf("127.0.0.1:%d:localhost:8000", lport), host)
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Process.Kill(); fwd.Wait() })
	var body string
	for i := 0; i < 100; i++ {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", lport))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if body != "served-inside\n" {
		t.Fatalf("ssh -L: got %q", body)
	}
	fwd.Process.Kill()
	fwd.Wait()

	// --record: the session's terminal as asciicast v2, named in the
	// connection's audit entry.
	cast := filepath.Join(work, "session.cast")
	if r := a.run("ssh", "connect", "sshbox", "--record", cast, "--", "sh", "-c", "echo recorded-line; tty"); r.code != 0 || !strings.Contains(r.stdout, "recorded-line") {
		t.Fatalf("ssh connect --record: %v", r)
	}
	cb, err := os.ReadFile(cast)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(cb)), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], `"version":2`) || !strings.Contains(string(cb), "recorded-line") || !strings.Contains(string(cb), "/dev/pts/") {
		t.Errorf("the recording:\n%s", cb)
	}
	if r := a.run("replay", "--speed", "100", cast); r.code != 0 || !strings.Contains(r.stdout, "recorded-line") {
		t.Errorf("replay of the recording: %v", r)
	}

	// The audit log: connections and their commands.
	var es []sshAuditEntry
	if err := json.Unmarshal([]byte(a.must("audit", "--json", "--sandbox", "sshbox").stdout), &es); err != nil {
		t.Fatal(err)
	}
	var conn, disc, execs, recorded int
	for _, e := range es {
		switch e.Action {
		case "ssh_connected":
			conn++
			if e.User != "sandbox" || !strings.HasPrefix(e.CertFingerprint, "SHA256:") {
				t.Errorf("ssh_connected entry: %+v", e)
			}
		case "ssh_disconnected":
			disc++
			if e.Recording == cast {
				recorded++
			}
		case "exec":
			if strings.HasPrefix(e.Who, "ssh sandbox@") {
				execs++
			}
		}
	}
	if recorded != 1 {
		t.Errorf("no ssh_disconnected entry names the recording %s", cast)
	}
	if conn < 8 || disc < 7 || execs < 5 {
		t.Errorf("audit: %d ssh_connected, %d ssh_disconnected, %d exec over ssh:\n%+v", conn, disc, execs, es)
	}
}

// freeHostPort is a free TCP port on the host's 127.0.0.1.
func freeHostPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestSSHAttacks: what must not log in, and what a logged-in client must
// not reach. A certificate of another CA, an expired one, one for
// another principal or of host type, a plain key, a password: all
// refused. ssh -L to a listener on the host's loopback reaches the
// sandbox's loopback instead (nothing there); -R is refused; sftp
// cannot leave the sandbox's root through "..", absolute links or /proc.
// Bad input to the CLI: clear errors, exit 125.
func TestSSHAttacks(t *testing.T) {
	sshClients(t)
	a, ref := withRegistry(t)
	cfg := sshSandbox(t, a, ref, "sshatk")
	host := "agentkernel-sshatk"
	sdir := filepath.Join(a.dataDir, "sandboxes", "sshatk", "ssh")
	port, err := sshd.Port(sdir)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ca, err := sshd.CASigner(sdir)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := sshd.HostSigner(sdir)
	if err != nil {
		t.Fatal(err)
	}
	_, otherCAKey, _ := ed25519.GenerateKey(rand.Reader)
	otherCA, _ := ssh.NewSignerFromKey(otherCAKey)
	_, clientKey, _ := ed25519.GenerateKey(rand.Reader)
	client, _ := ssh.NewSignerFromKey(clientKey)
	now := time.Now()
	cert := func(signer ssh.Signer, principal string, after, before time.Time, typ uint32) ssh.Signer {
		c, err := sshd.SignUserCert(signer, client.PublicKey(), principal, after, before)
		if err != nil {
			t.Fatal(err)
		}
		if typ != ssh.UserCert {
			c.CertType = typ
			if err := c.SignCert(rand.Reader, signer); err != nil {
				t.Fatal(err)
			}
		}
		s, err := ssh.NewCertSigner(c, client)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dial := func(user string, auth ...ssh.AuthMethod) error {
		c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: user, Auth: auth, HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey()), Timeout: 10 * time.Second})
		if err == nil {
			c.Close()
		}
		return err
	}
	// The good certificate logs in (the control).
	if err := dial("sandbox", ssh.PublicKeys(cert(ca, "sandbox", now.Add(-time.Minute), now.Add(time.Minute), ssh.UserCert))); err != nil {
		t.Fatalf("a valid certificate: %v", err)
	}
	for what, auth := range map[string]ssh.AuthMethod{
		"another CA's certificate":    ssh.PublicKeys(cert(otherCA, "sandbox", now.Add(-time.Minute), now.Add(time.Minute), ssh.UserCert)),
		"an expired certificate":      ssh.PublicKeys(cert(ca, "sandbox", now.Add(-2*time.Hour), now.Add(-time.Hour), ssh.UserCert)),
		"a certificate not valid yet": ssh.PublicKeys(cert(ca, "sandbox", now.Add(time.Hour), now.Add(2*time.Hour), ssh.UserCert)),
		"another principal":           ssh.PublicKeys(cert(ca, "root", now.Add(-time.Minute), now.Add(time.Minute), ssh.UserCert)),
		"a host certificate":          ssh.PublicKeys(cert(ca, "sandbox", now.Add(-time.Minute), now.Add(time.Minute), ssh.HostCert)),
		"a plain key":                 ssh.PublicKeys(client),
		"the CA's own key":            ssh.PublicKeys(ca),
		"a password":                  ssh.Password("sandbox"),
		"keyboard-interactive": ssh.KeyboardInteractive(func(string, string, []string, []bool) ([]string, error) {
			return []string{"sandbox"}, nil
		}),
	} {
		if err := dial("sandbox", auth); err == nil {
			t.Errorf("%s logged in", what)
		}
	}
	// A valid certificate for "sandbox" does not log in as root.
	if err := dial("root", ssh.PublicKeys(cert(ca, "sandbox", now.Add(-time.Minute), now.Add(time.Minute), ssh.UserCert))); err == nil {
		t.Errorf("logged in as root with the sandbox's certificate")
	}
	// OpenSSH with an expired certificate: refused, exit 255.
	work := t.TempDir()
	kp := filepath.Join(work, "expired")
	blk, _ := ssh.MarshalPrivateKey(clientKey, "")
	os.WriteFile(kp, pem.EncodeToMemory(blk), 0o600)
	old, _ := sshd.SignUserCert(ca, client.PublicKey(), "sandbox", now.Add(-2*time.Hour), now.Add(-time.Hour))
	os.WriteFile(kp+"-cert.pub", ssh.MarshalAuthorizedKey(old), 0o600)
	if r := openssh(t, "", "ssh", "-F", "/dev/null", "-i", kp, "-o", "CertificateFile="+kp+"-cert.pub", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile="+filepath.Join(sdir, "known_hosts"), "-o", "HostKeyAlias="+host, "-o", "StrictHostKeyChecking=yes",
		"-p", strconv.Itoa(port), "sandbox@127.0.0.1", "true"); r.code != 255 || !strings.Contains(r.stderr, "Permission denied") {
		t.Errorf("OpenSSH with an expired certificate: %v", r)
	}

	// ssh -L to a listener on the host's own loopback: the dial is made
	// in the sandbox's network namespace, where nothing listens there.
	hostLn, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	reached := make(chan struct{}, 1)
	go func() {
		if c, err := hostLn.Accept(); err == nil {
			reached <- struct{}{}
			c.Close()
		}
	}()
	hp := hostLn.Addr().(*net.TCPAddr).Port
	good, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "sandbox", Auth: []ssh.AuthMethod{ssh.PublicKeys(cert(ca, "sandbox", now.Add(-time.Minute), now.Add(time.Minute), ssh.UserCert))},
		HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey()), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	for _, target := range []string{"127.0.0.1", "localhost", "::1"} {
		if c, err := good.Dial("tcp", net.JoinHostPort(target, strconv.Itoa(hp))); err == nil {
			c.Close()
			t.Errorf("-L to %s:%d (the host's listener's port) connected", target, hp)
		}
	}
	// Other destinations (the host's address as the sandbox sees it, any
	// network) are refused outright.
	for _, target := range []string{"10.0.2.2:22", "192.0.2.1:80", "[fe80::1]:80", "example.com:80"} {
		if c, err := good.Dial("tcp", target); err == nil {
			c.Close()
			t.Errorf("-L to %s was allowed", target)
		}
	}
	// -R (remote forwarding) is refused.
	if l, err := good.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
		t.Errorf("-R was allowed")
	}
	select {
	case <-reached:
		t.Fatalf("a forwarded connection reached the host's loopback listener")
	case <-time.After(300 * time.Millisecond):
	}

	// sftp stays below the sandbox's root.
	secret := filepath.Join(work, "host-secret")
	os.WriteFile(secret, []byte("host only\n"), 0o600)
	a.must("exec", "sshatk", "--", "sh", "-c", "ln -s / /tmp/rootlink; ln -s ../../../../../../.. /tmp/uplink")
	batch := func(lines ...string) result {
		b := filepath.Join(work, "batch")
		os.WriteFile(b, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		return openssh(t, "", "sftp", "-F", cfg, "-b", b, host)
	}
	got := filepath.Join(work, "got")
	for _, p := range []string{"/../../../.." + secret, "/tmp/rootlink" + secret, "/tmp/uplink" + secret, "/proc/1/root" + secret, "/proc/self/environ"} {
		os.Remove(got)
		if r := batch("get " + p + " " + got); r.code == 0 {
			t.Errorf("sftp get %s succeeded: %v", p, r)
		}
		if b, err := os.ReadFile(got); err == nil {
			t.Errorf("sftp get %s brought %q", p, b)
		}
	}
	// Writes through the same paths land in the sandbox, never on the host.
	up := filepath.Join(work, "up")
	os.WriteFile(up, []byte("from sftp\n"), 0o644)
	hostTarget := filepath.Join(work, "written-by-sftp")
	// The same directories in the sandbox: the link resolves there.
	a.must("exec", "sshatk", "--", "mkdir", "-p", work)
	if r := batch("put "+up+" /tmp/uplink"+hostTarget, "put "+up+" /../.."+hostTarget, "rename /tmp/uplink"+hostTarget+" /tmp/uplink"+hostTarget+".2"); r.code != 0 {
		t.Errorf("sftp through the links, in the sandbox: %v", r)
	}
	if _, err := os.Lstat(hostTarget); err == nil {
		t.Errorf("sftp wrote the host's %s", hostTarget)
	}
	if _, err := os.Lstat(hostTarget + ".2"); err == nil {
		t.Errorf("sftp renamed onto the host's %s", hostTarget+".2")
	}
	if r := a.must("exec", "sshatk", "--", "cat", hostTarget+".2"); r.stdout != "from sftp\n" {
		t.Errorf("the write through the link, in the sandbox: %v", r)
	}

	// The CLI's refusals.
	if r := a.run("ssh", "connect", "no-such-sandbox"); r.code != 125 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("ssh connect of an unknown sandbox: %v", r)
	}
	a.must("sandbox", "create", "plain", "--image", ref, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "plain") })
	if r := a.run("ssh", "connect", "plain", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "without --ssh") {
		t.Errorf("ssh connect of a sandbox without --ssh: %v", r)
	}
	if r := a.run("ssh", "config", "plain"); r.code != 125 || !strings.Contains(r.stderr, "without --ssh") {
		t.Errorf("ssh config of a sandbox without --ssh: %v", r)
	}
	if r := a.run("sandbox", "create", "x", "--image", ref, "--ssh", "--ssh-user", "-oProxyCommand=x"); r.code == 0 {
		t.Errorf("a hostile --ssh-user was taken: %v", r)
	}
	if r := a.run("ssh", "connect", "../etc"); r.code != 125 {
		t.Errorf("ssh connect of a bad name: %v", r)
	}
	// Stopped: refused, and nothing listens on its port any more.
	good.Close()
	a.must("sandbox", "stop", "sshatk")
	if r := a.run("ssh", "connect", "sshatk", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("ssh connect of a stopped sandbox: %v", r)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the SSH port still answers after the sandbox stopped")
	}
	// Started again: the same port and host key.
	a.must("sandbox", "start", "sshatk")
	if p2, _ := sshd.Port(sdir); p2 != port {
		t.Logf("port changed across a restart: %d -> %d", port, p2)
	}
	a.must("ssh", "config", "sshatk")
	if r := openssh(t, "", "ssh", "-F", cfg, "-o", "BatchMode=yes", host, "echo again"); r.code != 0 || r.stdout != "again\n" {
		t.Errorf("after a restart, with the pinned host key: %v", r)
	}
}

// TestSSHCommandRules: a sandbox's [security.commands] apply to commands
// started over SSH, as to exec: refused with 126, and audited.
func TestSSHCommandRules(t *testing.T) {
	sshClients(t)
	a, ref := withRegistry(t)
	os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[security.commands]\nblock = [\"printf\"]\n"), 0o644)
	cfg := sshSandbox(t, a, ref, "sshrules")
	if r := a.run("ssh", "connect", "sshrules", "--", "printf", "ran"); r.code != 126 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, "printf") {
		t.Errorf("a blocked command over ssh connect: %v", r)
	}
	if r := openssh(t, "", "ssh", "-F", cfg, "agentkernel-sshrules", "printf ran"); r.code != 126 || strings.Contains(r.stdout, "ran") {
		t.Errorf("a blocked command over ssh: %v", r)
	}
	if r := openssh(t, "", "ssh", "-F", cfg, "agentkernel-sshrules", "echo allowed"); r.code != 0 || r.stdout != "allowed\n" {
		t.Errorf("an allowed command over ssh: %v", r)
	}
}
