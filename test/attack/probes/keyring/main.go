//go:build linux

// Probe keyring tries the kernel keyring (add_key, keyctl, request_key),
// which is not namespaced and has had privilege-escalation bugs.
package main

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "keyring"

func main() {
	var errs []string
	if id, err := unix.AddKey("user", "attack-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING); err == nil {
		report("allowed", fmt.Sprintf("add_key returned %d", id))
	} else {
		errs = append(errs, "add_key: "+err.Error())
	}
	if id, err := unix.KeyctlJoinSessionKeyring("attack-probe"); err == nil {
		report("allowed", fmt.Sprintf("keyctl(JOIN_SESSION_KEYRING) returned %d", id))
	} else {
		errs = append(errs, "keyctl join: "+err.Error())
	}
	if _, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, unix.KEY_SPEC_USER_KEYRING); err == nil {
		report("allowed", "keyctl(DESCRIBE, @u) succeeded")
	} else {
		errs = append(errs, "keyctl describe: "+err.Error())
	}
	if _, err := unix.RequestKey("user", "attack-probe", "", unix.KEY_SPEC_PROCESS_KEYRING); err == nil || (err != unix.EPERM && err != unix.ENOSYS && err != unix.EACCES) {
		if err == nil {
			report("allowed", "request_key succeeded")
		}
		errs = append(errs, "request_key reached the kernel: "+err.Error())
	} else {
		errs = append(errs, "request_key: "+err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }
