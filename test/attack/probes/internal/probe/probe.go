// Package probe is what every attack probe shares: the entry point that
// runs either the probe's attack (inside a sandbox) or its positive
// control (on the host, outside any sandbox), and the one line of JSON by
// which either reports its outcome to the battery (attack_linux_test.go).
//
// A probe's main is always
//
//	func main() { probe.Run(name, attack, control) }
//
// attack tries the escape and reports Blocked, Allowed, NotApplicable or
// Error. control runs when the battery sets ATTACK_CONTROL=1: it makes
// the same reachability check as attack, on the host, as the same kind of
// user the sandbox runs as, without harming the host, and reports
// Reachable (the target is there and this check reaches it), NotApplicable
// (the target does not exist on this machine, or the kernel refuses it to
// this kind of user whatever the sandbox does) or Unreachable (the target
// should be reachable but the check does not reach it: the probe is
// broken). The battery counts a sandbox's "blocked" as a defence only
// where the control said Reachable.
package probe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Results a probe reports.
const (
	// Blocked: the attack did not get through (attack mode).
	Blocked = "blocked"
	// Allowed: the attack got through (attack mode).
	Allowed = "allowed"
	// NotApplicable: the target does not exist on this machine, or the
	// kernel refuses it to this kind of user with or without a sandbox
	// (either mode).
	NotApplicable = "n-a"
	// Error: the probe itself could not run (either mode).
	Error = "error"
	// Reachable: outside any sandbox, the check reaches the target
	// (control mode).
	Reachable = "reachable"
	// Unreachable: the target should be reachable outside a sandbox but
	// the check does not reach it: the probe is broken (control mode).
	Unreachable = "unreachable"
)

// ControlEnv is set to "1" in the environment of a probe that is to run
// its positive control instead of its attack.
const ControlEnv = "ATTACK_CONTROL"

// Control reports whether this run is the probe's positive control.
func Control() bool { return os.Getenv(ControlEnv) == "1" }

// Run is every probe's main: attack inside a sandbox, control when the
// battery asks for the positive control. Both end by reporting.
func Run(name string, attack, control func()) {
	if Control() {
		control()
	} else {
		attack()
	}
	Report(name, Error, "the probe ended without a report")
}

// Report prints the outcome of probe name with a detail for the reader,
// as one JSON line on stdout, and ends the probe. A result that does not
// belong to the mode (Allowed from a control, Reachable from an attack)
// is reported as Error: the battery would otherwise misread it.
func Report(name, result, detail string) {
	valid := map[string]bool{NotApplicable: true, Error: true}
	if Control() {
		valid[Reachable], valid[Unreachable] = true, true
	} else {
		valid[Blocked], valid[Allowed] = true, true
	}
	if !valid[result] {
		detail = fmt.Sprintf("reported %q in %s mode: %s", result, mode(), detail)
		result = Error
	}
	line, _ := json.Marshal(Outcome{Probe: name, Result: result, Detail: detail})
	fmt.Println(string(line))
	os.Exit(0)
}

func mode() string {
	if Control() {
		return "control"
	}
	return "attack"
}

// Outcome is the report line.
type Outcome struct {
	Probe  string `json:"probe"`
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// ParseReport finds a probe's report in its output: the last line that
// parses.
func ParseReport(out []byte) (Outcome, bool) {
	lines := bytes.Split(out, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if !bytes.HasPrefix(l, []byte(`{"probe":`)) {
			continue
		}
		var o Outcome
		if json.Unmarshal(l, &o) == nil {
			return o, true
		}
	}
	return Outcome{}, false
}

// Privileged reports whether the probe runs as root. Outside a sandbox
// that is the root batteries' kind of user; every other user is the
// rootless battery's kind.
func Privileged() bool { return os.Geteuid() == 0 }

// Sysctl reads /proc/sys/<name> ("kernel/dmesg_restrict"), trimmed; ""
// when it does not exist.
func Sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// HostToken dials addr over TCP and reports whether what answers is the
// host's test listener: its first bytes carry token. Otherwise detail
// says what happened instead (the dial's error, or another service).
func HostToken(addr, token string) (reached bool, detail string) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false, err.Error()
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 128)
	n, _ := c.Read(buf)
	if strings.Contains(string(buf[:n]), token) {
		return true, ""
	}
	return false, addr + ": connected to something that is not the host listener"
}
