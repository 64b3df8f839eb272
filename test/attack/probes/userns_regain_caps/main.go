//go:build linux

// Probe userns_regain_caps tries to create a new user namespace (where the
// creator gets a full capability set) plus a mount namespace, and then to
// mount in it: the classic way to regain capabilities and reach kernel
// code that is otherwise privileged.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "userns_regain_caps"

func main() { probe.Run(name, attack, control) }

func attack() {
	if len(os.Args) > 1 && os.Args[1] == "inner" {
		if err := unix.Mount("tmpfs", "/tmp", "tmpfs", 0, ""); err != nil {
			fmt.Printf("userns created, mount failed: %v\n", err)
			os.Exit(3)
		}
		fmt.Println("mounted tmpfs inside a new user namespace")
		os.Exit(0)
	}
	var errs []string
	for _, how := range []string{"clone", "unshare"} {
		cmd := exec.Command("/proc/self/exe", "inner")
		attr := &syscall.SysProcAttr{
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
		if how == "clone" {
			attr.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS
		} else {
			attr.Unshareflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS
		}
		cmd.SysProcAttr = attr
		out, err := cmd.CombinedOutput()
		if err == nil {
			report("allowed", how+": "+strings.TrimSpace(string(out)))
		}
		errs = append(errs, how+": "+err.Error()+" "+strings.TrimSpace(string(out)))
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the same user namespace is created and the
// mount in it succeeds.
func control() {
	probe.AttackReaches(name, nil, func(a probe.Attack) {
		if !probe.Privileged() && (probe.Sysctl("user/max_user_namespaces") == "0" || probe.Sysctl("kernel/unprivileged_userns_clone") == "0") {
			report(probe.NotApplicable, "this host gives unprivileged users no user namespaces, sandbox or not: "+a.Detail)
		}
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }
