//go:build linux

// Probe host_unix_socket tries to connect to a unix socket the host
// listens on by path, and to the usual container-engine sockets.
package main

import (
	"net"
	"os"
	"strings"
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
		c, err := net.DialTimeout("unix", p, 2*time.Second)
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
