package netpolicy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests that need an "internet" run in a network namespace of their
// own: TestMain starts the test binary again inside a new one (a user
// namespace too when not root), where 198.18.0.0/15 addresses on its
// loopback stand in for the internet. The machine's own network is never
// touched, and the namespace goes with the process.
const netnsEnv = "AGENTKERNEL_NETPOLICY_NETNS"

// netnsReady is set in the re-executed test binary once its namespace is
// set up; netnsErr says why there is none.
var (
	netnsReady bool
	netnsErr   error
)

// testAddrs are put on the namespace's loopback.
var testAddrs = []string{
	"198.18.0.10/32", "198.18.0.11/32", "198.18.0.12/32", "198.18.0.13/32",
	"198.18.0.20/32", "198.18.0.30/32", "198.18.0.53/32", "198.18.0.99/32",
	"2001:2::10/128",
}

func TestMain(m *testing.M) {
	if os.Getenv(netnsEnv) == "" {
		cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
		cmd.Env = append(os.Environ(), netnsEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
		if os.Geteuid() != 0 {
			cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			os.Exit(0)
		case errors.As(err, &ee) && ee.Exited():
			os.Exit(ee.ExitCode())
		case errors.As(err, &ee):
			fmt.Fprintf(os.Stderr, "test binary in its network namespace: %v\n", err)
			os.Exit(2)
		}
		// No namespace: the tests that need one report it.
		netnsErr = fmt.Errorf("cannot make a network namespace: %w", err)
		os.Exit(m.Run())
	}
	if err := setupNetns(); err != nil {
		netnsErr = err
	} else {
		netnsReady = true
	}
	os.Exit(m.Run())
}

func setupNetns() error {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return fmt.Errorf("needs the ip command (iproute2): %w", err)
	}
	run := func(args ...string) error {
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
		return nil
	}
	if err := run("link", "set", "lo", "up"); err != nil {
		return err
	}
	for _, a := range testAddrs {
		args := []string{"addr", "add", a, "dev", "lo"}
		if strings.Contains(a, ":") {
			args = []string{"-6", "addr", "add", a, "dev", "lo", "nodad"}
		}
		if err := run(args...); err != nil {
			return err
		}
	}
	// Wait until every address can be connected to: an IPv6 address's
	// route may come a moment after the address.
	deadline := time.Now().Add(5 * time.Second)
	for _, a := range testAddrs {
		host := strings.Split(a, "/")[0]
		for {
			err := selfConnect(host)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("address %s never became usable: %w", host, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// selfConnect connects to a listener on host, from host.
func selfConnect(host string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
