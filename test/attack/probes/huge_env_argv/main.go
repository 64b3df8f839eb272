//go:build linux

// Probe huge_env_argv reports how much argv and environment reached it.
// The runner starts it with an enormous argv/environment: agentkernel
// must refuse cleanly (E2BIG, exit 126) or pass it through, and stay
// healthy either way; the runner judges the result.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

const name = "huge_env_argv"

func main() {
	a, e := 0, 0
	for _, s := range os.Args {
		a += len(s) + 1
	}
	for _, s := range os.Environ() {
		e += len(s) + 1
	}
	report("allowed", fmt.Sprintf("received %d args (%d bytes) and %d env entries (%d bytes)", len(os.Args), a, len(os.Environ()), e))
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
