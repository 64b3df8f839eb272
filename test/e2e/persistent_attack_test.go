//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// persistentProbes are the attack probes (test/attack/probes) that aim at
// what a persistent sandbox adds to a run: an init that serves clients
// on a host socket it holds open, and stays for the sandbox's life.
var persistentProbes = []string{"ptrace_init", "proc_root_escape", "setns", "host_unix_socket", "read_data_dir", "fd_leak", "signal_host"}

// TestPersistentSandboxAttacks runs those probes as root inside a
// running persistent sandbox (copied in with cp, started with exec, the
// way an agent's commands arrive) and requires every one to report
// "blocked": the init's descriptors (the listening socket among them),
// its memory, its namespaces, the sandbox's own socket by its host path
// and the data directory stay out of reach. As in the attack battery, a
// "blocked" counts only where the probe's positive control, run on the
// host first with the same targets, reached its target.
func TestPersistentSandboxAttacks(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the probes are built for linux/amd64 and arm64")
	}
	bin := t.TempDir()
	args := []string{"build", "-trimpath", "-o", bin + "/"}
	for _, p := range persistentProbes {
		args = append(args, "../attack/probes/"+p)
	}
	build := exec.Command("go", args...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probes: %v\n%s", err, out)
	}
	a := newAK(t)
	const token = "persistent-attack-token"
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte(token), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must("sandbox", "create", "target", "--image", "host", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "target") })
	if err := os.WriteFile(filepath.Join(a.dataDir, "attack-canary"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	victim := exec.Command("sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer victim.Process.Kill()
	env := []string{
		"ATTACK_TOKEN=" + token, "ATTACK_HOST_CANARY=" + canary, "ATTACK_DATA_DIR=" + a.dataDir,
		"ATTACK_UNIX_PATH=" + filepath.Join(a.dataDir, "sandboxes", "target", "sock"),
		"ATTACK_HOST_PID=" + strconv.Itoa(victim.Process.Pid), "ATTACK_VICTIM_TOKEN=sleep",
	}
	controls := map[string]string{}
	for _, p := range persistentProbes {
		dir := t.TempDir()
		c := exec.Command(filepath.Join(bin, p))
		c.Dir = dir
		c.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "ATTACK_CONTROL=1"}, env...)
		out, err := c.Output()
		rep, ok := lastReport(out)
		switch {
		case !ok:
			t.Errorf("%s: the positive control gave no report (%v): %s", p, err, out)
		case rep.Result != "reachable" && rep.Result != "n-a":
			t.Errorf("%s: the positive control ended %s (the probe cannot show its target is reachable outside a sandbox): %s", p, rep.Result, rep.Detail)
		}
		controls[p] = rep.Result
	}
	for _, p := range persistentProbes {
		a.must("cp", filepath.Join(bin, p), "target:/tmp/"+p)
		execArgs := []string{"exec"}
		for _, e := range env {
			execArgs = append(execArgs, "-e", e)
		}
		execArgs = append(execArgs, "target", "--", "/tmp/"+p)
		r := a.run(execArgs...)
		rep, ok := lastReport([]byte(r.stdout))
		switch {
		case !ok:
			t.Errorf("%s: no report: %v", p, r)
		case controls[p] == "n-a" && (rep.Result == "blocked" || rep.Result == "n-a"):
			t.Logf("%s: not applicable here (its control found no target): %s", p, rep.Detail)
		case rep.Result != "blocked":
			t.Errorf("%s: %s: %s", p, rep.Result, rep.Detail)
		default:
			t.Logf("%s: blocked: %s", p, rep.Detail)
		}
	}
	// The victim is this test's child, not reaped yet: its pid is its own.
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(victim.Process.Pid) + "/stat"); err != nil || strings.Contains(string(st), ") Z ") {
		t.Errorf("the host victim process ended")
	}
}

// lastReport is the last line of out that is a probe's report.
func lastReport(out []byte) (rep struct{ Probe, Result, Detail string }, ok bool) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if json.Unmarshal([]byte(strings.TrimSpace(lines[i])), &rep) == nil && rep.Probe != "" {
			return rep, true
		}
	}
	return rep, false
}
