//go:build linux

// Probe unshare_ns tries to create each kind of namespace (except user,
// see userns_regain_caps) in a child: unshare(2) after fork, and clone(2)
// with the namespace flag.
package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "unshare_ns"

func main() { probe.Run(name, attack, control) }

func attack() {
	if len(os.Args) > 1 && os.Args[1] == "noop" {
		os.Exit(0)
	}
	var errs, got []string
	for _, ns := range []struct {
		n string
		f uintptr
	}{{"mnt", unix.CLONE_NEWNS}, {"net", unix.CLONE_NEWNET}, {"pid", unix.CLONE_NEWPID},
		{"uts", unix.CLONE_NEWUTS}, {"ipc", unix.CLONE_NEWIPC}, {"cgroup", unix.CLONE_NEWCGROUP},
		{"time", unix.CLONE_NEWTIME}} {
		for _, how := range []string{"unshare", "clone"} {
			cmd := exec.Command("/proc/self/exe", "noop")
			if how == "unshare" {
				cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: ns.f}
			} else {
				cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: ns.f}
			}
			if err := cmd.Run(); err == nil {
				got = append(got, how+"("+ns.n+")")
			} else {
				errs = append(errs, how+"("+ns.n+"): "+err.Error())
			}
		}
	}
	if len(got) > 0 {
		report("allowed", "created namespaces: "+strings.Join(got, ", "))
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the same children get their namespaces: as
// root directly, as an unprivileged user inside a user namespace of its
// own (as a rootless sandbox's root has one).
func control() {
	probe.Isolated(name, 0, func() { probe.AttackReaches(name, nil, nil) })
}

func report(result, detail string) { probe.Report(name, result, detail) }
