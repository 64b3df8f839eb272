//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/agent"
)

// memKB is a process's Rss, Pss and Anonymous from smaps_rollup.
type memKB struct{ rss, pss, anon int64 }

func readMem(pid int) (memKB, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memKB{}, err
	}
	var m memKB
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			m.rss = n
		case "Pss:":
			m.pss = n
		case "Anonymous:":
			m.anon = n
		}
	}
	return m, nil
}

// sandboxPids returns the supervisor's pid (supervisor.pid) and its
// child, the sandbox's init.
func sandboxPids(dataDir, name string) (sup, init int, err error) {
	data, err := os.ReadFile(filepath.Join(dataDir, "sandboxes", name, "supervisor.pid"))
	if err != nil {
		return 0, 0, err
	}
	if sup, err = strconv.Atoi(strings.Fields(string(data))[0]); err != nil {
		return 0, 0, err
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", sup))
	for _, t := range tasks {
		kids, _ := os.ReadFile(t)
		for _, k := range strings.Fields(string(kids)) {
			pid, _ := strconv.Atoi(k)
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), "agentkernel:init") {
				return sup, pid, nil
			}
		}
	}
	return sup, 0, fmt.Errorf("sandbox %s: no init under supervisor %d", name, sup)
}

// BenchmarkSandboxIdleMemory starts AK_BENCH_SANDBOXES (50) sandboxes
// of the host image, lets them idle, and reports what each costs in
// memory: RSS, PSS and anonymous memory of its supervisor plus its init,
// averaged over the sandboxes; and the exec round trip into a sandbox
// that was idle (its processes map their pages again) against one that
// was just used. Run it alone: -run '^$' -bench SandboxIdleMemory
// -benchtime 1x.
func BenchmarkSandboxIdleMemory(b *testing.B) {
	n := 50
	if v, err := strconv.Atoi(os.Getenv("AK_BENCH_SANDBOXES")); err == nil && v > 0 {
		n = v
	}
	a := &ak{dataDir: b.TempDir(), home: b.TempDir(), dir: b.TempDir()}
	run := func(args ...string) {
		c := a.cmd(context.Background(), args...)
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("idle%d", i)
		run("sandbox", "create", names[i], "--image", "host", "--start")
	}
	defer func() {
		for _, name := range names {
			run("sandbox", "rm", "--force", name)
		}
	}()
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer devnull.Close()
	exec1 := func(name string) time.Duration {
		c, err := agent.Dial(filepath.Join(a.dataDir, "sandboxes", name, "sock"))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		t0 := time.Now()
		ws, err := c.Exec(context.Background(), agent.ExecRequest{Args: []string{"/bin/true"}}, devnull, devnull, devnull, nil)
		if err != nil || ws.ExitStatus() != 0 {
			b.Fatal(err, ws)
		}
		return time.Since(t0)
	}
	// One exec each, as a used sandbox has had, then idle.
	for _, name := range names {
		exec1(name)
	}
	b.ResetTimer()
	for range b.N {
		time.Sleep(12 * time.Second) // past idleTrimAfter (10 s)
		var sup, ini, stub memKB
		for _, name := range names {
			sp, ip, err := sandboxPids(a.dataDir, name)
			if err != nil {
				b.Fatal(err)
			}
			s, err1 := readMem(sp)
			i, err2 := readMem(ip)
			if err1 != nil || err2 != nil {
				b.Fatal(err1, err2)
			}
			sup.rss, sup.pss, sup.anon = sup.rss+s.rss, sup.pss+s.pss, sup.anon+s.anon
			ini.rss, ini.pss, ini.anon = ini.rss+i.rss, ini.pss+i.pss, ini.anon+i.anon
			// The exec stage armed for the next command (waiting).
			for _, p := range armedStubs(sp, ip) {
				if m, err := readMem(p); err == nil {
					stub.rss, stub.pss, stub.anon = stub.rss+m.rss, stub.pss+m.pss, stub.anon+m.anon
				}
			}
		}
		per := func(kb int64) float64 { return float64(kb) / float64(n) / 1024 }
		b.ReportMetric(per(sup.rss+ini.rss+stub.rss), "MiB-rss/sandbox")
		b.ReportMetric(per(sup.pss+ini.pss+stub.pss), "MiB-pss/sandbox")
		b.ReportMetric(per(sup.anon+ini.anon+stub.anon), "MiB-anon/sandbox")
		b.Logf("%d sandboxes idle: supervisor RSS %.2f PSS %.2f anon %.2f MiB; init RSS %.2f PSS %.2f anon %.2f MiB; armed exec stage RSS %.3f PSS %.3f anon %.3f MiB (means)",
			n, per(sup.rss), per(sup.pss), per(sup.anon), per(ini.rss), per(ini.pss), per(ini.anon), per(stub.rss), per(stub.pss), per(stub.anon))
		// Exec into idle sandboxes, then into the same ones again.
		var idle, warm []time.Duration
		for _, name := range names[:min(n, 20)] {
			idle = append(idle, exec1(name))
			warm = append(warm, exec1(name))
		}
		b.Logf("exec /bin/true round trip: after idle %v, right after another %v (medians)", medianOf(idle), medianOf(warm))
	}
}

func medianOf(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestSandboxAfterIdleTrim lets a sandbox's supervisor and init trim
// their memory (10 s without a request), checks that they did (RSS of
// each below 8 MiB, which an untrimmed one exceeds: it maps most of the
// binary), and that exec, file copies and stats still work afterwards.
func TestSandboxAfterIdleTrim(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 12 s")
	}
	a := newAK(t)
	a.must("sandbox", "create", "trim", "--image", "host", "--start")
	defer a.run("sandbox", "rm", "--force", "trim")
	if r := a.must("exec", "trim", "--", "sh", "-c", "echo before > /tmp/x"); r.code != 0 {
		t.Fatal(r)
	}
	time.Sleep(12 * time.Second)
	sp, ip, err := sandboxPids(a.dataDir, "trim")
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{sp, ip} {
		m, err := readMem(pid)
		if err != nil {
			t.Fatal(err)
		}
		if m.rss > 8<<10 {
			t.Errorf("pid %d: RSS %d kB after idling (not trimmed?)", pid, m.rss)
		}
	}
	if r := a.must("exec", "trim", "--", "cat", "/tmp/x"); strings.TrimSpace(r.stdout) != "before" {
		t.Errorf("exec after trim: %v", r)
	}
	host := filepath.Join(a.dir, "out.txt")
	a.must("cp", "trim:/tmp/x", host)
	if b, err := os.ReadFile(host); err != nil || string(b) != "before\n" {
		t.Errorf("cp after trim: %q %v", b, err)
	}
	if r := a.must("stats", "trim"); !strings.Contains(r.stdout, "trim") {
		t.Errorf("stats after trim: %v", r)
	}
}
