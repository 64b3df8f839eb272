//go:build linux

// Probe cloud_metadata tries the cloud instance-metadata endpoints
// (169.254.169.254, fd00:ec2::254) that hand out credentials on cloud VMs.
package main

import (
	"net"
	"os"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "cloud_metadata"

var addrs = []string{"169.254.169.254:80", "[fd00:ec2::254]:80", "169.254.170.2:80"}

func main() { probe.Run(name, attack, control) }

func attack() {
	var errs []string
	for _, addr := range addrs {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			report("allowed", "connected to "+addr)
		}
		errs = append(errs, err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

// cloudVendors are DMI vendor and product strings of clouds that serve
// instance metadata at these addresses.
var cloudVendors = []string{"Amazon EC2", "Google", "Microsoft Corporation", "OpenStack", "DigitalOcean",
	"Alibaba Cloud", "Oracle", "Hetzner", "Scaleway", "Tencent Cloud", "Exoscale", "Vultr", "Linode", "Upcloud"}

// platform names the cloud this machine runs on, from what the kernel
// shows locally (DMI, the Xen hypervisor UUID), or "".
func platform() string {
	for _, f := range []string{"sys_vendor", "product_name", "bios_vendor", "board_vendor", "chassis_asset_tag"} {
		b, _ := os.ReadFile("/sys/class/dmi/id/" + f)
		for _, v := range cloudVendors {
			if strings.Contains(string(b), v) {
				return strings.TrimSpace(string(b))
			}
		}
	}
	if b, _ := os.ReadFile("/sys/hypervisor/uuid"); strings.HasPrefix(strings.ToLower(string(b)), "ec2") {
		return "Amazon EC2 (Xen)"
	}
	return ""
}

// localMetadata reports whether a metadata address is one of this
// machine's own (an emulator on a local interface).
func localMetadata() bool {
	as, _ := net.InterfaceAddrs()
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok && (ipn.IP.String() == "169.254.169.254" || ipn.IP.String() == "fd00:ec2::254" || ipn.IP.String() == "169.254.170.2") {
			return true
		}
	}
	return false
}

// control: on a machine that is a cloud VM (or has a metadata emulator on
// a local interface), the same connection from the host reaches the
// metadata service. Elsewhere there is no service to reach, and the
// control does not send packets off the machine to find out.
func control() {
	p := platform()
	if p == "" && !localMetadata() {
		report(probe.NotApplicable, "no cloud platform is recognised on this machine (no cloud DMI vendor, no metadata address on an interface): there is no metadata service to reach; nothing was dialled")
	}
	var errs []string
	for _, addr := range addrs {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			report(probe.Reachable, "the metadata service answers outside a sandbox at "+addr+" ("+p+")")
		}
		errs = append(errs, err.Error())
	}
	report(probe.NotApplicable, "nothing answers at the metadata addresses even outside a sandbox ("+p+"): "+strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }
