//go:build linux

// Probe packet_socket tries to open an AF_PACKET socket (sniffing and
// injecting frames on any interface the namespace has).
package main

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "packet_socket"

func main() { probe.Run(name, attack, control) }

func try() (string, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */)
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return fmt.Sprintf("AF_PACKET socket opened; interfaces: %v", names), nil
}

func attack() {
	got, err := try()
	if err == nil {
		report("allowed", got)
	}
	report("blocked", "AF_PACKET: "+err.Error())
}

// control: the same socket outside a sandbox (opened and closed at once):
// root in the host's network namespace, an unprivileged user in a user
// and network namespace of its own (as a rootless sandbox's root has).
func control() {
	check := func() {
		got, err := try()
		switch {
		case err == nil:
			report(probe.Reachable, got+" outside a sandbox")
		case err == unix.EAFNOSUPPORT:
			report(probe.NotApplicable, "this kernel has no AF_PACKET: "+err.Error())
		}
		report(probe.Unreachable, "AF_PACKET: "+err.Error())
	}
	if probe.Privileged() {
		check()
	}
	probe.Isolated(name, unix.CLONE_NEWNET, check)
}

func report(result, detail string) { probe.Report(name, result, detail) }
