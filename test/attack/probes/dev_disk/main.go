//go:build linux

// Probe dev_disk tries to open the host's block devices and device-mapper
// / loop control nodes by their usual names.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dev_disk"

var devices = []string{"/dev/sda", "/dev/vda", "/dev/vdb", "/dev/xvda", "/dev/nvme0n1", "/dev/loop0",
	"/dev/loop-control", "/dev/dm-0", "/dev/mapper/control", "/dev/sr0", "/dev/root", "/dev/md0"}

func main() { probe.Run(name, attack, control) }

// try opens each device read-only and reads its first 512 bytes.
func try() (opened string, missing []string, present int) {
	for _, p := range devices {
		f, err := os.Open(p)
		if err != nil {
			missing = append(missing, p+": "+probe.Errno(err))
			if !errors.Is(err, os.ErrNotExist) {
				present++
			}
			continue
		}
		n, _ := f.Read(make([]byte, 512))
		f.Close()
		return fmt.Sprintf("opened %s (read %d bytes)", p, n), nil, present + 1
	}
	return "", missing, present
}

func attack() {
	if opened, missing, _ := try(); opened != "" {
		report("allowed", opened)
	} else {
		report("blocked", strings.Join(missing, "; "))
	}
}

// control: outside a sandbox the same devices open (read-only; 512 bytes
// read).
func control() {
	opened, missing, present := try()
	switch {
	case opened != "":
		report(probe.Reachable, opened+" outside a sandbox")
	case present == 0:
		report(probe.NotApplicable, "none of these devices exists on this machine")
	case !probe.Privileged() && probe.RefusedText(missing, true):
		report(probe.NotApplicable, "this user may open none of the host's disks, with or without a sandbox: "+strings.Join(missing, "; "))
	}
	report(probe.Unreachable, strings.Join(missing, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }
