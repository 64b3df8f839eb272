//go:build linux

// Probe setuid_nnp runs as a non-root user and executes a setuid-root copy
// of itself (/probes/setuid_nnp.suid, mode 4755, owned by the sandbox's
// root). With no_new_privs (or nosuid) the bit is ignored: the helper must
// still have euid != 0, must fail setuid(0) and must not read /root-only
// (mode 0400, root).
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "setuid_nnp"

func main() { probe.Run(name, attack, control) }

// helper is the set-user-ID copy's side ("helper" as its argument): it
// says whether it got root.
func helper() {
	if len(os.Args) < 2 || os.Args[1] != "helper" {
		return
	}
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
	os.Exit(0)
}

// noNewPrivs is this process's NoNewPrivs field.
func noNewPrivs() string {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "NoNewPrivs:") {
				return strings.TrimSpace(strings.TrimPrefix(l, "NoNewPrivs:"))
			}
		}
	}
	return "?"
}

func attack() {
	helper()
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
	nnp := noNewPrivs()
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

// control: outside a sandbox a set-user-ID-root copy of this probe, run
// by a non-root user (nobody), gets root. The copy lives in a directory
// only root can enter and is run through a descriptor
// (/proc/self/fd/3), so no other user can reach it; it is removed at
// once.
func control() {
	helper()
	if !probe.Privileged() {
		report(probe.NotApplicable, "only root can make a set-user-ID-root file, with or without a sandbox")
	}
	if nnp := noNewPrivs(); nnp != "0" {
		report(probe.NotApplicable, "this process already runs with no_new_privs (NoNewPrivs="+nnp+"): set-user-ID bits never work here")
	}
	dir, err := os.MkdirTemp("", "attack-suid-control-")
	if err != nil {
		report(probe.Error, err.Error())
	}
	defer os.RemoveAll(dir)
	suid, err := copySetuid(filepath.Join(dir, "setuid_nnp.suid"))
	if err != nil {
		os.RemoveAll(dir)
		report(probe.Error, err.Error())
	}
	defer suid.Close()
	cmd := exec.Command("/proc/self/fd/3", "helper")
	cmd.ExtraFiles = []*os.File{suid}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	suid.Close()
	os.RemoveAll(dir)
	s := strings.TrimSpace(string(out))
	if strings.HasPrefix(s, "ESCALATED") {
		report(probe.Reachable, "outside a sandbox uid 65534 running a set-user-ID-root copy gets root: "+s)
	}
	report(probe.Unreachable, fmt.Sprintf("the set-user-ID-root copy did not give root (%v): %s", err, s))
}

// copySetuid copies this binary to p as a root-owned mode 4755 file and
// returns it open for reading.
func copySetuid(p string) (*os.File, error) {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o700)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return nil, err
	}
	if err := dst.Chmod(os.ModeSetuid | 0o755); err != nil {
		dst.Close()
		return nil, err
	}
	if err := dst.Close(); err != nil {
		return nil, err
	}
	return os.Open(p)
}

func report(result, detail string) { probe.Report(name, result, detail) }
