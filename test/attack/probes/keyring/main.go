//go:build linux

// Probe keyring tries the kernel keyring (add_key, keyctl, request_key),
// which is not namespaced and has had privilege-escalation bugs.
package main

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "keyring"

func main() { probe.Run(name, attack, control) }

// try uses the keyring: a key in the process keyring, a named session
// keyring of its own, a look at the user keyring, a request_key.
func try() (got string, errs []string, enosys int) {
	note := func(what string, err error) {
		errs = append(errs, what+": "+err.Error())
		if errors.Is(err, unix.ENOSYS) {
			enosys++
		}
	}
	if id, err := unix.AddKey("user", "attack-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING); err == nil {
		return fmt.Sprintf("add_key returned %d", id), nil, 0
	} else {
		note("add_key", err)
	}
	if id, err := unix.KeyctlJoinSessionKeyring("attack-probe"); err == nil {
		return fmt.Sprintf("keyctl(JOIN_SESSION_KEYRING) returned %d", id), nil, 0
	} else {
		note("keyctl join", err)
	}
	if _, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, unix.KEY_SPEC_USER_KEYRING); err == nil {
		return "keyctl(DESCRIBE, @u) succeeded", nil, 0
	} else {
		note("keyctl describe", err)
	}
	if _, err := unix.RequestKey("user", "attack-probe", "", unix.KEY_SPEC_PROCESS_KEYRING); err == nil {
		return "request_key succeeded", nil, 0
	} else if err != unix.EPERM && err != unix.ENOSYS && err != unix.EACCES {
		errs = append(errs, "request_key reached the kernel: "+err.Error())
	} else {
		note("request_key", err)
	}
	return "", errs, enosys
}

func attack() {
	got, errs, _ := try()
	if got != "" {
		report("allowed", got)
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: the same calls outside a sandbox (the key and the session
// keyring belong to this short-lived process).
func control() {
	got, errs, enosys := try()
	switch {
	case got != "":
		report(probe.Reachable, got+" outside a sandbox")
	case enosys == 4 && seccompFree():
		report(probe.NotApplicable, "this kernel has no keyring: "+strings.Join(errs, "; "))
	}
	report(probe.Unreachable, strings.Join(errs, "; "))
}

// seccompFree: no seccomp filter could have returned this process's
// ENOSYS (probe.KernelLacks).
func seccompFree() bool {
	lacks, _ := probe.KernelLacks()
	return lacks
}

func report(result, detail string) { probe.Report(name, result, detail) }
