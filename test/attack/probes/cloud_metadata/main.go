//go:build linux

// Probe cloud_metadata tries the cloud instance-metadata endpoints
// (169.254.169.254, fd00:ec2::254) that hand out credentials on cloud VMs.
package main

import (
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/sys/unix"

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

// metadataIP is where the control's emulated metadata service listens.
var metadataIP = [4]byte{169, 254, 169, 254}

// control: in a network namespace of its own (never the host's: nothing
// is dialled off the machine, whatever cloud this runs on), an emulated
// metadata service listens at 169.254.169.254:80, and the attack's own
// dials reach it. That proves the probe reaches the metadata address
// wherever a route to it exists; in the sandbox the same dials must find
// none.
func control() {
	probe.Isolated(name, unix.CLONE_NEWNET, func() {
		if err := emulate(); err != nil {
			report(probe.Error, "setting up the emulated metadata service in a network namespace of its own: "+err.Error())
		}
		var errs []string
		for _, addr := range addrs {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err == nil {
				c.Close()
				report(probe.Reachable, "the attack's dial reaches an emulated metadata service at "+addr+" (a network namespace of the control's own; nothing dialled off the machine)")
			}
			errs = append(errs, err.Error())
		}
		report(probe.Unreachable, "the emulated metadata service does not answer the attack's dials: "+strings.Join(errs, "; "))
	})
}

// emulate brings up loopback in this (new) network namespace, gives it
// the metadata address (an alias, lo:1) and accepts connections there.
func emulate() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	lo, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, lo); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	lo.SetUint16(lo.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	alias, err := unix.NewIfreq("lo:1")
	if err != nil {
		return err
	}
	if err := alias.SetInet4Addr(metadataIP[:]); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, alias); err != nil {
		return fmt.Errorf("adding 169.254.169.254 to lo: %w", err)
	}
	l, err := net.Listen("tcp", "169.254.169.254:80")
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return nil
}

func report(result, detail string) { probe.Report(name, result, detail) }
