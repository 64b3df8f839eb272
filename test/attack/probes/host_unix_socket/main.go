//go:build linux

// Probe host_unix_socket tries to connect to a unix socket the host
// listens on by path (stream or seqpacket), and to the usual
// container-engine sockets.
package main

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "host_unix_socket"

func main() { probe.Run(name, attack, control) }

func attack() {
	var errs []string
	for _, p := range []string{os.Getenv("ATTACK_UNIX_PATH"), "/var/run/docker.sock", "/run/containerd/containerd.sock",
		"/run/podman/podman.sock", "/run/dbus/system_bus_socket", "/run/systemd/private"} {
		if p == "" {
			continue
		}
		// A stream connect to a SOCK_SEQPACKET listener (a persistent
		// sandbox's own socket is one) fails with EPROTOTYPE although the
		// socket is there: try both types.
		c, err := net.DialTimeout("unix", p, 2*time.Second)
		if errors.Is(err, syscall.EPROTOTYPE) {
			c, err = net.DialTimeout("unixpacket", p, 2*time.Second)
		}
		if err == nil {
			c.Close()
			report("allowed", "connected to "+p)
		}
		errs = append(errs, err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: the same connection from the host reaches the test's socket
// (tried first).
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }
