//go:build linux

// Probe caps_dangerous reads its capability sets from /proc/self/status and
// reports any capability that breaks isolation (SYS_ADMIN, SYS_PTRACE,
// SYS_MODULE, DAC_READ_SEARCH, NET_ADMIN, SYS_RAWIO, SYS_BOOT, SYS_TIME,
// BPF, PERFMON, MAC_ADMIN, ...) in the effective, permitted, bounding or
// ambient set.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "caps_dangerous"

var dangerous = map[int]string{2: "DAC_READ_SEARCH", 12: "NET_ADMIN", 16: "SYS_MODULE", 17: "SYS_RAWIO",
	19: "SYS_PTRACE", 20: "SYS_PACCT", 21: "SYS_ADMIN", 22: "SYS_BOOT", 24: "SYS_RESOURCE", 25: "SYS_TIME",
	26: "SYS_TTY_CONFIG", 32: "MAC_OVERRIDE", 33: "MAC_ADMIN", 34: "SYSLOG", 35: "WAKE_ALARM",
	36: "BLOCK_SUSPEND", 38: "PERFMON", 39: "BPF", 40: "CHECKPOINT_RESTORE"}

func main() { probe.Run(name, attack, control) }

// scan lists the dangerous capabilities in each set.
func scan() (found, sets []string) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		report("error", err.Error())
	}
	for _, l := range strings.Split(string(b), "\n") {
		for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if !strings.HasPrefix(l, set+":") {
				continue
			}
			v, _ := strconv.ParseUint(strings.TrimSpace(l[len(set)+1:]), 16, 64)
			sets = append(sets, fmt.Sprintf("%s=%#x", set, v))
			for bit, n := range dangerous {
				if v&(1<<uint(bit)) != 0 {
					found = append(found, set+":"+n)
				}
			}
		}
	}
	return found, sets
}

func attack() {
	found, sets := scan()
	if len(found) > 0 {
		report("allowed", "dangerous capabilities: "+strings.Join(found, " ")+" ("+strings.Join(sets, " ")+")")
	}
	report("blocked", strings.Join(sets, " "))
}

// control: the same scan outside any sandbox finds dangerous capabilities
// (root's effective set; any process's bounding set).
func control() {
	found, sets := scan()
	if len(found) > 0 {
		report(probe.Reachable, fmt.Sprintf("outside a sandbox this process holds %d dangerous capability bits (%s)", len(found), strings.Join(sets, " ")))
	}
	report(probe.NotApplicable, "this host's processes hold no dangerous capability, not even in the bounding set: "+strings.Join(sets, " "))
}

func report(result, detail string) { probe.Report(name, result, detail) }
