//go:build linux

// Probe cloud_metadata tries the cloud instance-metadata endpoints
// (169.254.169.254, fd00:ec2::254) that hand out credentials on cloud VMs.
package main

import (
	"net"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "cloud_metadata"

func main() {
	var errs []string
	for _, addr := range []string{"169.254.169.254:80", "[fd00:ec2::254]:80", "169.254.170.2:80"} {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			report("allowed", "connected to "+addr)
		}
		errs = append(errs, err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }
