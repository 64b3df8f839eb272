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

func main() {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */)
	if err == nil {
		unix.Close(fd)
		ifs, _ := net.Interfaces()
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		report("allowed", fmt.Sprintf("AF_PACKET socket opened; interfaces: %v", names))
	}
	report("blocked", "AF_PACKET: "+err.Error())
}

func report(result, detail string) { probe.Report(name, result, detail) }
