//go:build linux

// Probe setuid_nnp runs as a non-root user and executes a setuid-root copy
// of itself (/probes/setuid_nnp.suid, mode 4755, owned by the sandbox's
// root). With no_new_privs (or nosuid) the bit is ignored: the helper must
// still have euid != 0, must fail setuid(0) and must not read /root-only
// (mode 0400, root).
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "setuid_nnp"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "helper" {
		var got []string
		if os.Geteuid() == 0 {
			got = append(got, "euid 0")
		}
		if err := unix.Setuid(0); err == nil {
			got = append(got, "setuid(0) ok")
		}
		if b, err := os.ReadFile("/root-only"); err == nil {
			got = append(got, "read /root-only: "+strings.TrimSpace(string(b)))
		}
		if len(got) > 0 {
			fmt.Println("ESCALATED " + strings.Join(got, ", "))
		} else {
			fmt.Printf("uid=%d euid=%d, setuid(0) failed, /root-only unreadable\n", os.Getuid(), os.Geteuid())
		}
		return
	}
	if os.Getuid() == 0 {
		report("error", "run this probe as a non-root user")
	}
	helper := os.Getenv("ATTACK_SUID_HELPER")
	if helper == "" {
		helper = "/probes/setuid_nnp.suid"
	}
	fi, err := os.Stat(helper)
	if err != nil || fi.Mode()&os.ModeSetuid == 0 {
		report("error", fmt.Sprintf("setuid helper missing or not setuid: %v", err))
	}
	nnp := "?"
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "NoNewPrivs:") {
				nnp = strings.TrimSpace(strings.TrimPrefix(l, "NoNewPrivs:"))
			}
		}
	}
	out, err := exec.Command(helper, "helper").CombinedOutput()
	s := strings.TrimSpace(string(out))
	if strings.HasPrefix(s, "ESCALATED") {
		report("allowed", s+" (NoNewPrivs="+nnp+")")
	}
	if err != nil {
		report("blocked", fmt.Sprintf("helper failed: %v %s (NoNewPrivs=%s)", err, s, nnp))
	}
	report("blocked", s+" (NoNewPrivs="+nnp+")")
}

func report(result, detail string) { probe.Report(name, result, detail) }
