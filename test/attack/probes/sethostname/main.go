//go:build linux

// Probe sethostname tries to set the host name and NIS domain name (to
// their current values, so a success changes nothing but proves the
// capability; the sandbox has its own UTS namespace either way).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const name = "sethostname"

func main() {
	h, _ := os.Hostname()
	e1 := unix.Sethostname([]byte(h))
	var u unix.Utsname
	unix.Uname(&u)
	e2 := unix.Setdomainname(bytes.TrimRight(u.Domainname[:], "\x00"))
	if e1 == nil || e2 == nil {
		report("allowed", fmt.Sprintf("sethostname: %v, setdomainname: %v (own UTS namespace: %q)", e1, e2, h))
	}
	report("blocked", fmt.Sprintf("sethostname: %v; setdomainname: %v", e1, e2))
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
