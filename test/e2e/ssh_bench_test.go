//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// TestSSHTimings measures, with AGENTKERNEL_SSH_BENCH=1 (N rounds,
// AGENTKERNEL_SSH_BENCH_N, default 15): an interactive SSH session's
// set-up (ssh -tt started to the shell's first prompt), 'ssh host true',
// 'agentkernel ssh connect NAME -- true' (a new key and certificate
// each time) and 'agentkernel exec NAME true', alternating, medians.
func TestSSHTimings(t *testing.T) {
	if os.Getenv("AGENTKERNEL_SSH_BENCH") != "1" {
		t.Skip("set AGENTKERNEL_SSH_BENCH=1 to measure")
	}
	sshClients(t)
	n := 15
	fmt.Sscan(os.Getenv("AGENTKERNEL_SSH_BENCH_N"), &n)
	a, ref := withRegistry(t)
	cfg := sshSandbox(t, a, ref, "sshbench")
	host := "agentkernel-sshbench"
	timed := func(name string, args ...string) time.Duration {
		c := exec.Command(name, args...)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		start := time.Now()
		if err := c.Run(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out.String())
		}
		return time.Since(start)
	}
	prompt := func() time.Duration {
		c := exec.Command("ssh", "-F", cfg, "-tt", host)
		start := time.Now()
		f, err := pty.StartWithSize(c, &pty.Winsize{Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		timer := time.AfterFunc(10*time.Second, func() { f.Close() })
		defer timer.Stop()
		var seen []byte
		buf := make([]byte, 4096)
		var took time.Duration
		for {
			k, err := f.Read(buf)
			seen = append(seen, buf[:k]...)
			if s := string(seen); strings.Contains(s, "# ") || strings.Contains(s, "$ ") {
				took = time.Since(start)
				break
			}
			if err != nil {
				t.Fatalf("no prompt: %v %q", err, seen)
			}
		}
		f.Write([]byte("exit\n"))
		c.Wait()
		return took
	}
	bin := binary
	kinds := []string{"ssh -tt: first prompt", "ssh host true", "agentkernel ssh connect -- true", "agentkernel exec true"}
	res := map[string][]time.Duration{}
	for i := 0; i < n+1; i++ {
		d := []time.Duration{
			prompt(),
			timed("ssh", "-F", cfg, host, "true"),
			timed(bin, "--data-dir", a.dataDir, "ssh", "connect", "sshbench", "--", "true"),
			timed(bin, "--data-dir", a.dataDir, "exec", "sshbench", "--", "true"),
		}
		if i == 0 {
			continue // warm-up
		}
		for k, v := range d {
			res[kinds[k]] = append(res[kinds[k]], v)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| what | median | min | max | n |\n|---|---|---|---|---|\n")
	for _, k := range kinds {
		v := res[k]
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", k, ms(v[len(v)/2]), ms(v[0]), ms(v[len(v)-1]), len(v))
	}
	t.Logf("\n%s", b.String())
}
