//go:build linux

// Probe dev_disk tries to open the host's block devices and device-mapper
// / loop control nodes by their usual names.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dev_disk"

func main() {
	var missing []string
	for _, p := range []string{"/dev/sda", "/dev/vda", "/dev/vdb", "/dev/xvda", "/dev/nvme0n1", "/dev/loop0",
		"/dev/loop-control", "/dev/dm-0", "/dev/mapper/control", "/dev/sr0", "/dev/root", "/dev/md0"} {
		f, err := os.Open(p)
		if err != nil {
			missing = append(missing, p+": "+shortErr(err))
			continue
		}
		n, _ := f.Read(make([]byte, 512))
		f.Close()
		report("allowed", fmt.Sprintf("opened %s (read %d bytes)", p, n))
	}
	report("blocked", strings.Join(missing, "; "))
}

func shortErr(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

func report(result, detail string) { probe.Report(name, result, detail) }
