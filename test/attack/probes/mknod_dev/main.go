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

func main() {
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

func report(result, detail string) { probe.Report(name, result, detail) }
