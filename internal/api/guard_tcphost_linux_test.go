package api

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// envTCPHostNetNS marks the copy of this test binary that
// TestServeTCPHost runs in a network namespace of its own.
const envTCPHostNetNS = "AKAPI_TEST_TCPHOST_NETNS"

// tcpHostExt is the address, not a loopback one, that TestServeTCPHost
// gives this machine (inside its own network namespace).
const tcpHostExt = "198.51.100.7"

// TestServeTCPHost: the address the client dialled is a valid Host;
// other interface addresses only when the listener is bound to all. It
// runs in a network namespace of its own whose lo also holds tcpHostExt,
// so that a machine's own interface address is always there to test.
func TestServeTCPHost(t *testing.T) {
	if os.Getenv(envTCPHostNetNS) == "" {
		ipTool, err := exec.LookPath("ip")
		if err != nil {
			testenv.Missing(t, "needs ip (iproute2)")
			return
		}
		attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
		if os.Geteuid() != 0 {
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestServeTCPHost$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envTCPHostNetNS+"="+ipTool)
		cmd.SysProcAttr = attr
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(err.Error(), "fork/exec") {
			testenv.Missing(t, "cannot make a network namespace: %v", err)
			return
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestServeTCPHost") {
			t.Errorf("in a network namespace of its own: %v\n%s", err, out)
		}
		return
	}
	ipTool := os.Getenv(envTCPHostNetNS)
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", tcpHostExt + "/32", "dev", "lo"}} {
		if out, err := exec.Command(ipTool, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	ext := tcpHostExt

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := guardServer(t, Options{})
	served(t, s, ln)
	addr := ln.Addr().String()
	dial := func() (net.Conn, error) { return net.Dial("tcp", addr) }
	if code, _ := get(t, dial, addr, "/status", "Authorization", "Bearer k"); code != 200 {
		t.Errorf("Host %s: %d", addr, code)
	}
	if code, _ := get(t, dial, addr, "/status"); code != 401 {
		t.Errorf("TCP without key: %d", code)
	}
	if code, _ := get(t, dial, "evil.example", "/status", "Authorization", "Bearer k"); code != 403 {
		t.Errorf("TCP rebinding Host: %d", code)
	}
	if code, _ := get(t, dial, ext, "/status", "Authorization", "Bearer k"); code != 403 {
		t.Errorf("listener on 127.0.0.1, Host %s (another interface's address): %d, want 403", ext, code)
	}

	all, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := guardServer(t, Options{})
	served(t, s2, all)
	_, port, _ := net.SplitHostPort(all.Addr().String())
	dial2 := func() (net.Conn, error) { return net.Dial("tcp", net.JoinHostPort("127.0.0.1", port)) }
	if code, _ := get(t, dial2, net.JoinHostPort(ext, port), "/status", "Authorization", "Bearer k"); code != 200 {
		t.Errorf("listener on 0.0.0.0, Host %s (an interface address): %d, want 200", ext, code)
	}
	dialExt := func() (net.Conn, error) { return net.Dial("tcp", net.JoinHostPort(ext, port)) }
	if code, _ := get(t, dialExt, net.JoinHostPort(ext, port), "/status", "Authorization", "Bearer k"); code != 200 {
		t.Errorf("connected to %s with that Host: %d", ext, code)
	}
	if code, _ := get(t, dial2, "203.0.113.77:"+port, "/status", "Authorization", "Bearer k"); code != 403 {
		t.Errorf("listener on 0.0.0.0, Host 203.0.113.77 (not this machine's): %d, want 403", code)
	}
}
