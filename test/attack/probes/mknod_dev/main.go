//go:build linux

// Probe mknod_dev tries to create device nodes for host memory (c 1:1),
// the first disks (b 8:0 sda, b 253:0/254:0 vda) and kvm (c 10:232), and
// to read through them.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "mknod_dev"

func main() { probe.Run(name, attack, control) }

func attack() {
	dirs := []string{"/tmp", "/dev/shm", "/", "/workspace"}
	var errs []string
	for _, n := range []struct {
		name  string
		mode  uint32
		major uint32
		minor uint32
	}{{"mem", unix.S_IFCHR, 1, 1}, {"sda", unix.S_IFBLK, 8, 0}, {"vda", unix.S_IFBLK, 254, 0}, {"vda253", unix.S_IFBLK, 253, 0}, {"kvm", unix.S_IFCHR, 10, 232}} {
		for _, d := range dirs {
			p := filepath.Join(d, "attack-node-"+n.name)
			err := unix.Mknod(p, n.mode|0o600, int(unix.Mkdev(n.major, n.minor)))
			if err != nil {
				errs = append(errs, p+": "+err.Error())
				continue
			}
			f, err := os.Open(p)
			if err != nil {
				os.Remove(p)
				errs = append(errs, p+" created but open: "+err.Error())
				continue
			}
			k, _ := f.Read(make([]byte, 16))
			f.Close()
			os.Remove(p)
			if k > 0 {
				report("allowed", fmt.Sprintf("created and read %s (%d:%d)", p, n.major, n.minor))
			}
			errs = append(errs, p+" created, read 0 bytes")
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox a character device node (c 1:5, zero: the
// harmless one) is created in a directory of its own and reads through to
// its device.
func control() {
	dir, err := os.MkdirTemp("", "attack-mknod-control-")
	if err != nil {
		report(probe.Error, err.Error())
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "zero")
	err = unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 5)))
	if err != nil {
		os.RemoveAll(dir)
		if !probe.Privileged() && probe.Refused(err) {
			report(probe.NotApplicable, "device nodes need CAP_MKNOD in the initial user namespace, which this user lacks with or without a sandbox: "+err.Error())
		}
		report(probe.Unreachable, "mknod: "+err.Error())
	}
	f, err := os.Open(p)
	if err != nil {
		os.RemoveAll(dir)
		report(probe.Unreachable, "created, but open: "+err.Error())
	}
	k, _ := f.Read(make([]byte, 16))
	f.Close()
	os.RemoveAll(dir)
	if k != 16 {
		report(probe.Unreachable, fmt.Sprintf("created, but read %d bytes", k))
	}
	report(probe.Reachable, "outside a sandbox mknod makes a character device node (c 1:5) that reads through to its device")
}

func report(result, detail string) { probe.Report(name, result, detail) }
