package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/sshd"
)

// loopbackDialer is a sandbox that connects to ports of its own
// loopback from inside its network namespace (native's Instance).
type loopbackDialer interface {
	DialLoopback(port uint16) (*os.File, error)
}

// startSSH serves SSH for the sandbox in dir (spec.SSH set) on
// 127.0.0.1: the port it had before when it is free, else a new one,
// recorded in dir/ssh/port. Its keys are made at the first start. The
// returned stop ends every connection; it must run before the
// sandbox's instance is closed.
func startSSH(spec *sandbox.Spec, dir string, inst sandbox.Instance, served agent.Sandbox) (func(), error) {
	name := filepath.Base(dir)
	sdir := sshd.Dir(dir)
	if err := sshd.Ensure(sdir, name); err != nil {
		return nil, fmt.Errorf("ssh keys: %w", err)
	}
	ca, err := sshd.CASigner(sdir)
	if err != nil {
		return nil, err
	}
	host, err := sshd.HostSigner(sdir)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	if port, perr := sshd.Port(sdir); perr == nil {
		ln, _ = net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(port))
	}
	if ln == nil {
		if ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("ssh: listening on 127.0.0.1: %w", err)
		}
	}
	if err := sshd.WritePort(sdir, ln.Addr().(*net.TCPAddr).Port); err != nil {
		ln.Close()
		return nil, err
	}
	fsys := served.FS()
	shell, uid, gid := loginShell(fsys, spec.User)
	if fsys != nil && fsys.UID >= 0 && uid > 0 {
		// What sftp creates belongs to the sandbox's user: its ids
		// inside, on the sandbox's block of host ids.
		c := *fsys
		c.UID, c.GID = fsys.UID+uid, fsys.GID+gid
		fsys = &c
	}
	user := sshd.DefaultUser
	if spec.SSH != nil && spec.SSH.User != "" {
		user = spec.SSH.User
	}
	log := audit.New(filepath.Dir(filepath.Dir(dir)))
	o := sshd.Options{
		Sandbox: name,
		User:    user,
		CA:      ca.PublicKey(),
		HostKey: host,
		Dial:    func() (*agent.Client, error) { return agent.Dial(filepath.Join(dir, "sock")) },
		FS:      fsys,
		Check: func(args []string) error {
			err := spec.Commands.Check(args)
			var ce *sandbox.CommandRefusedError
			if errors.As(err, &ce) {
				ce.Sandbox = name
			}
			return err
		},
		Shell: shell,
		Audit: func(e audit.Entry) {
			if err := log.Append(e); err != nil {
				fmt.Fprintf(os.Stderr, "agentkernel: audit log: %v\n", err)
			}
		},
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "agentkernel: "+format+"\n", args...) },
	}
	if d, ok := inst.(loopbackDialer); ok {
		o.DialPort = d.DialLoopback
	}
	srv, err := sshd.New(o)
	if err != nil {
		ln.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil {
			fmt.Fprintf(os.Stderr, "agentkernel: ssh: %v\n", err)
		}
	}()
	return func() {
		ln.Close()
		<-done
		srv.Close()
	}, nil
}

// loginShell finds the sandbox user's login shell and ids in the
// sandbox's /etc/passwd (user as the spec gives it: a name or
// "uid[:gid]", "" for root); /bin/sh and the ids given when it is not
// listed.
func loginShell(fsys *agent.FS, user string) (string, int, int) {
	shell, uid, gid := "/bin/sh", 0, 0
	name := user
	if u, g, ok := strings.Cut(user, ":"); ok {
		name = u
		gid, _ = strconv.Atoi(g)
	}
	if n, err := strconv.Atoi(name); err == nil {
		uid, name = n, ""
	} else if name == "" {
		name = "root"
	}
	if fsys == nil {
		return shell, uid, gid
	}
	f, err := fsys.Open("/etc/passwd")
	if err != nil {
		return shell, uid, gid
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Split(sc.Text(), ":")
		if len(fl) < 7 {
			continue
		}
		if (name != "" && fl[0] != name) || (name == "" && fl[2] != strconv.Itoa(uid)) {
			continue
		}
		uid, _ = strconv.Atoi(fl[2])
		if !strings.Contains(user, ":") {
			gid, _ = strconv.Atoi(fl[3])
		}
		if fl[6] != "" && strings.HasPrefix(fl[6], "/") {
			if _, err := fsys.Stat(fl[6]); err == nil {
				shell = fl[6]
			}
		}
		break
	}
	return shell, uid, gid
}
