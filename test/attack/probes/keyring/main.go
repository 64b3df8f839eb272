//go:build linux

// Probe keyring tries the kernel keyring (add_key, keyctl, request_key),
// which is not namespaced and has had privilege-escalation bugs.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
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

func report(result, detail string) {
	line, _ := json.Marshal(struct {
		Probe  string `json:"probe"`
		Result string `json:"result"`
		Detail string `json:"detail"`
	}{name, result, detail})
	fmt.Println(string(line))
	os.Exit(0)
}
