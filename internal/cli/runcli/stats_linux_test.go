package runcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// hostLine is the host's line of 'stats', its figures the machine's.
var hostLine = regexp.MustCompile(`^host: [1-9][0-9]* CPUs, [0-9.]+% busy, load [0-9.]+; memory [0-9.]+[KMGT]?i?B of [0-9.]+[KMGT]iB used; data dir [0-9.]+[KMGT]?i?B, [0-9.]+[KMGT]?i?B free; (\d+) sandboxes, (\d+) running\n$`)

// TestLeanStats: stats of running sandboxes served over their
// directories alone: each sandbox's figures from its agent (CPU sampled
// between two asks), the host's totals, printed by the writer
// agentkernel-full prints with; a name given twice is sampled once and
// shown twice, as agentkernel-full shows it.
func TestLeanStats(t *testing.T) {
	dd := t.TempDir()
	dev, _ := serveSandbox(t, dd, "dev", specJSON(t, nil), false)
	web, _ := serveSandbox(t, dd, "web", nil, false)

	a, out, errb := leanApp()
	if err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "stats", "dev", "web", "dev"}); err != nil {
		t.Fatalf("stats: %v (%s)", err, errb.String())
	}
	// Each agent's CPU time grows by 0.25 s per ask; each is asked once
	// before the sample and once after (dev for both its rows).
	row := func(name string, cpu, pct float64) sandbox.Usage {
		return sandbox.Usage{Name: name, Status: sandbox.StatusRunning, CPUPercent: pct, CPUSeconds: cpu, MemoryBytes: 3 << 20,
			Pids: 1, UpperBytes: 2048, InitRSS: 1 << 20}
	}
	var want bytes.Buffer
	if err := WriteStats(&want, []sandbox.Usage{row("dev", 0.5, 50), row("web", 0.5, 50), row("dev", 0.5, 50)}, sandbox.HostUsage{}, false); err != nil {
		t.Fatal(err)
	}
	table, _, _ := strings.Cut(want.String(), "\nhost: ")
	got, host, ok := strings.Cut(out.String(), "\nhost: ")
	if !ok || got != table {
		t.Fatalf("stats table:\n%s\nwant:\n%s", out.String(), table)
	}
	if m := hostLine.FindStringSubmatch("host: " + host); m == nil || m[1] != "3" || m[2] != "3" {
		t.Errorf("host line: %q", host)
	}
	if dev.statsCalls() != 2 || web.statsCalls() != 2 {
		t.Errorf("agents asked %d and %d times, want 2 and 2", dev.statsCalls(), web.statsCalls())
	}

	a, out, _ = leanApp()
	if err := a.ExecuteSandboxCommand([]string{"stats", "--json", "--data-dir", dd, "web"}); err != nil {
		t.Fatalf("stats --json: %v", err)
	}
	var st struct {
		Sandboxes []sandbox.Usage   `json:"sandboxes"`
		Host      sandbox.HostUsage `json:"host"`
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	u := st.Sandboxes
	if len(u) != 1 || u[0].Name != "web" || u[0].Status != sandbox.StatusRunning || u[0].CPUSeconds != 1.0 || u[0].CPUPercent != 50 ||
		u[0].MemoryBytes != 3<<20 || st.Host.CPUs < 1 || st.Host.MemoryTotalBytes <= 0 || st.Host.Sandboxes != 1 || st.Host.Running != 1 {
		t.Errorf("stats --json: %s", out.String())
	}
	if es := auditEntries(t, dd); len(es) != 0 {
		t.Errorf("stats was audited: %+v", es)
	}
}

// TestLeanStatsHandsOff: stats that the sandboxes' directories cannot
// answer goes to agentkernel-full (ErrNeedsFull) before anything is
// printed or asked of any agent: every sandbox (no NAME), an unknown or
// stopped one among running ones, a name that is a path (to a sandbox
// that answers), help, a flag the parser refuses.
func TestLeanStatsHandsOff(t *testing.T) {
	dd := t.TempDir()
	dev, _ := serveSandbox(t, dd, "dev", specJSON(t, nil), false)
	serveSandbox(t, dd, "stopped", specJSON(t, nil), true)
	outside, _ := serveSandbox(t, dd, "../escape", specJSON(t, nil), false)
	for _, argv := range [][]string{
		{"--data-dir", dd, "stats"},
		{"--data-dir", dd, "stats", "--json"},
		{"--data-dir", dd, "stats", "nosuch"},
		{"--data-dir", dd, "stats", "dev", "nosuch"},
		{"--data-dir", dd, "stats", "dev", "stopped"},
		{"--data-dir", dd, "stats", "../escape"},
		{"--data-dir", dd, "stats", "dev", "../escape"},
		{"--data-dir", dd, "stats", "dev/../../escape"},
		{"--data-dir", dd, "stats", "-h", "dev"},
		{"--data-dir", dd, "stats", "--bogus", "dev"},
		{"--data-dir", dd, "stats", "--json=maybe", "dev"},
		{"--data-dir", dd, "sandbox", "stats", "dev"},
	} {
		a, out, errb := leanApp()
		err := a.ExecuteSandboxCommand(argv)
		if !errors.Is(err, ErrNeedsFull) {
			t.Errorf("%q: %v, want ErrNeedsFull", argv, err)
		}
		if out.Len() > 0 || errb.Len() > 0 {
			t.Errorf("%q printed %q %q before handing off", argv, out.String(), errb.String())
		}
	}
	if n, m := dev.statsCalls(), outside.statsCalls(); n != 0 || m != 0 {
		t.Errorf("agents asked for stats %d and %d times by command lines that were handed off", n, m)
	}
}

// TestStatsDiskOfRunning: the DISK of a running sandbox whose agent does
// not measure its writable layer (the native backend's does not) is the
// size of the layer on the host, as for a stopped one, not 0B.
func TestStatsDiskOfRunning(t *testing.T) {
	dd := t.TempDir()
	sb, _ := serveSandbox(t, dd, "dev", specJSON(t, nil), false)
	sb.mu.Lock()
	sb.noDisk = true
	sb.mu.Unlock()
	upper := filepath.Join(dd, "sandboxes", "dev", "upper", "root")
	if err := os.MkdirAll(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "big"), make([]byte, 5<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "small"), make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	a, out, _ := leanApp()
	if err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "stats", "--json", "dev"}); err != nil {
		t.Fatalf("stats --json: %v", err)
	}
	var st struct {
		Sandboxes []sandbox.Usage `json:"sandboxes"`
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || len(st.Sandboxes) != 1 {
		t.Fatalf("%v: %s", err, out.String())
	}
	if u := st.Sandboxes[0]; u.Status != sandbox.StatusRunning || u.UpperBytes != 5<<20+1000 {
		t.Errorf("running sandbox: status %s, upper_bytes %d, want %d", u.Status, u.UpperBytes, 5<<20+1000)
	}
	a, out, _ = leanApp()
	if err := a.ExecuteSandboxCommand([]string{"--data-dir", dd, "stats", "dev"}); err != nil {
		t.Fatalf("stats: %v", err)
	}
	if !regexp.MustCompile(`\ndev +running +[0-9.]+ +[0-9.]+s +3\.0MiB +1 +5\.0MiB +1\.0MiB\n`).MatchString(out.String()) {
		t.Errorf("stats table, want DISK 5.0MiB:\n%s", out.String())
	}
}
