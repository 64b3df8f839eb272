// Package probe is what every attack probe shares: the one line of JSON
// by which it reports its outcome to the battery (attack_linux_test.go).
package probe

import (
	"encoding/json"
	"fmt"
	"os"
)

// Report prints the outcome of probe name ("blocked", "allowed", or
// "error" when the probe itself could not run) with a detail for the
// reader, as one JSON line on stdout, and ends the probe.
func Report(name, result, detail string) {
	line, _ := json.Marshal(struct {
		Probe  string `json:"probe"`
		Result string `json:"result"`
		Detail string `json:"detail"`
	}{name, result, detail})
	fmt.Println(string(line))
	os.Exit(0)
}
