//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNomadCommandLine drives -B nomad through the built binaries
// (agentkernel hands the line to agentkernel-full) against a real Nomad
// dev agent, whose raw_exec tasks run this tree's agentkernel-full as the
// node's: sandbox create (waiting until it answers), list, exec with its
// status and streams, cp both ways, remove leaving no job; then run,
// with stdin, its status, no network under --network none, and nothing
// left; a hostile name refused before any request.
func TestNomadCommandLine(t *testing.T) {
	l, full, nodeData := startNomadNode(t)
	a := newAK(t)
	cfg := filepath.Join(a.home, "nomad.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[orchestrator]\nnomad_addr = %q\n", l.Address)), 0o600); err != nil {
		t.Fatal(err)
	}
	nomadArgs := func(args ...string) []string {
		return append([]string{args[0], "-B", "nomad", "-c", cfg, "--node-agentkernel", full, "--node-data-dir", nodeData}, args[1:]...)
	}
	if r := a.run(nomadArgs("sandbox", "create", "box", "--image", "host", "--network", "none")...); r.code != 0 || r.stdout != "box\n" {
		t.Fatalf("create: %s", r)
	}
	defer a.run(nomadArgs("sandbox", "remove", "box")...)
	if r := a.run(nomadArgs("sandbox", "list")...); r.code != 0 || !strings.Contains(r.stdout, "box") {
		t.Errorf("list: %s", r)
	}
	if r := a.run(nomadArgs("sandbox", "exec", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 3")...); r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("exec: %s", r)
	}
	src := filepath.Join(t.TempDir(), "in.txt")
	payload := strings.Repeat("nomad cp line\n", 3000)
	os.WriteFile(src, []byte(payload), 0o644)
	if r := a.run(nomadArgs("cp", src, "box:/tmp/in.txt")...); r.code != 0 {
		t.Errorf("cp in: %s", r)
	}
	out := t.TempDir()
	if r := a.run(nomadArgs("cp", "box:/tmp/in.txt", out)...); r.code != 0 {
		t.Errorf("cp out: %s", r)
	}
	if b, err := os.ReadFile(filepath.Join(out, "in.txt")); err != nil || string(b) != payload {
		t.Errorf("cp round trip: %d bytes (%v), want %d", len(b), err, len(payload))
	}
	if r := a.run(nomadArgs("sandbox", "remove", "box")...); r.code != 0 {
		t.Errorf("remove: %s", r)
	}
	if r := a.run(nomadArgs("sandbox", "list")...); strings.Contains(r.stdout, "box") {
		t.Errorf("listed after remove: %s", r)
	}

	// A warm pool: a job started ahead, taken by a create of its spec.
	if r := a.run(nomadArgs("pool", "fill", "warm", "--image", "host", "--network", "none", "--size", "1", "--wait")...); r.code != 0 {
		t.Fatalf("pool fill: %s", r)
	}
	defer a.run(nomadArgs("pool", "drain", "warm")...)
	r := a.run(nomadArgs("sandbox", "create", "pooled", "--pool", "warm", "--image", "host", "--network", "none")...)
	if r.code != 0 || r.stdout != "pooled\n" || !strings.Contains(r.stderr, "taken from pool warm") {
		t.Fatalf("create from the pool: %s", r)
	}
	// Its job and its name on the node are the pool job's, and said so.
	m := regexp.MustCompile(`sandbox pooled: job agentkernel\.(pool-[0-9a-f]{16}) \(its name held by job agentkernel-pooled\); on the node, sandbox (pool-[0-9a-f]{16})\n`).FindStringSubmatch(r.stderr)
	if m == nil || m[1] != m[2] {
		t.Fatalf("create from the pool does not name its job and node sandbox: %s", r)
	}
	if r := a.run(nomadArgs("sandbox", "list")...); !regexp.MustCompile(`(?m)^pooled +running .* ` + m[2] + `\s*$`).MatchString(r.stdout) {
		t.Errorf("list does not show the pooled sandbox's node name %s: %s", m[2], r)
	}
	if out, err := exec.Command(full, "--data-dir", nodeData, "-q", "sandbox", "list").Output(); err != nil || !strings.Contains(string(out), m[2]+" ") {
		t.Errorf("the node's sandbox list: %s %v", out, err)
	}
	if r := a.run(nomadArgs("sandbox", "exec", "pooled", "--", "sh", "-c", "echo pooled; exit 5")...); r.code != 5 || r.stdout != "pooled\n" {
		t.Errorf("exec in the pooled sandbox: %s", r)
	}
	if r := a.run(nomadArgs("sandbox", "list")...); r.code != 0 || !strings.Contains(r.stdout, "pooled") {
		t.Errorf("list: %s", r)
	}
	if r := a.run(nomadArgs("sandbox", "remove", "pooled")...); r.code != 0 {
		t.Errorf("remove the pooled sandbox: %s", r)
	}
	if r := a.run(nomadArgs("pool", "drain", "warm")...); r.code != 0 {
		t.Errorf("pool drain: %s", r)
	}

	a.stdin = "to the run\n"
	r = a.run(nomadArgs("run", "--image", "host", "--network", "none", "-i", "--", "sh", "-c", "cat; exit 4")...)
	if r.code != 4 || r.stdout != "to the run\n" {
		t.Errorf("run: %s", r)
	}
	a.stdin = ""
	if r := a.run(nomadArgs("sandbox", "list")...); strings.Contains(r.stdout, "run-") {
		t.Errorf("a run's sandbox left: %s", r)
	}
	if r := a.run(nomadArgs("sandbox", "create", "../x")...); r.code != 125 || !strings.Contains(r.stderr, "DNS label") {
		t.Errorf("hostile name: %s", r)
	}
}
