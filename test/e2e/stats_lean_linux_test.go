//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stateOpens watches dir for opens of the state store's files
// (state.db and its -wal and -shm); the returned function reports how
// many happened since the last call.
func stateOpens(t *testing.T, dir string) func() int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN|unix.IN_CREATE); err != nil {
		t.Fatal(err)
	}
	return func() int {
		n := 0
		buf := make([]byte, 64<<10)
		for {
			k, err := unix.Read(fd, buf)
			if err != nil && err != unix.EAGAIN {
				t.Fatal(err)
			}
			if k <= 0 {
				return n
			}
			for off := 0; off+unix.SizeofInotifyEvent <= k; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := string(buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)])
				if strings.HasPrefix(strings.TrimRight(name, "\x00"), "state.db") {
					n++
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

// figures are what changes from one 'stats' to the next: every number,
// with its unit (880.8MiB one time, 1.2GiB the next).
var figures = regexp.MustCompile(`[0-9]+(\.[0-9]+)?([KMGT]iB|B)?`)

// statsShape is a stats table with its figures masked and its columns
// single-spaced (their widths follow the figures).
func statsShape(s string) string {
	var lines []string
	for _, l := range strings.Split(figures.ReplaceAllString(s, "N"), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

// sameShape reports where two decoded JSON values differ in keys or in
// types, and in the values at the paths in stable (".host.cpus"; items
// of arrays have their array's path), which the two must agree on.
func sameShape(t *testing.T, path string, a, b any, stable map[string]bool) {
	t.Helper()
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		t.Errorf("%s: %T against %T", path, a, b)
		return
	}
	switch a := a.(type) {
	case map[string]any:
		b := b.(map[string]any)
		for k := range b {
			if _, ok := a[k]; !ok {
				t.Errorf("%s.%s: only agentkernel-full prints it", path, k)
			}
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok {
				t.Errorf("%s.%s: only agentkernel prints it", path, k)
				continue
			}
			if stable[path+"."+k] && !reflect.DeepEqual(v, w) {
				t.Errorf("%s.%s: %v against agentkernel-full's %v", path, k, v, w)
			}
			sameShape(t, path+"."+k, v, w, stable)
		}
	case []any:
		b := b.([]any)
		if len(a) != len(b) {
			t.Errorf("%s: %d items against %d", path, len(a), len(b))
			return
		}
		for i := range a {
			sameShape(t, path, a[i], b[i], stable)
		}
	}
}

// TestStatsServedByAgentkernel: 'agentkernel stats NAME' of a running
// sandbox is served by the agentkernel binary alone (it never opens the
// state store, and works without agentkernel-full beside it) and prints
// what agentkernel-full prints, in the same table and JSON (DISK: the
// root's and the copy-on-write project volume's layers); what it
// cannot serve (every sandbox, a stopped or unknown one, a name that is
// a path) is agentkernel-full's answer.
func TestStatsServedByAgentkernel(t *testing.T) {
	a, _ := newSandbox(t, "st")
	full := filepath.Join(filepath.Dir(binary), "agentkernel-full")
	opens := stateOpens(t, a.dataDir)
	runFull := func(args ...string) result {
		t.Helper()
		a.bin = full
		defer func() { a.bin = "" }()
		return a.must(args...)
	}

	// DISK counts the copy-on-write project volume's layer too, in both.
	a.sh("st", "head -c 300000 /dev/zero > /workspace/big && head -c 200000 /dev/zero > /root/big")

	// JSON: the same keys and types, the same values where they do not
	// move between two samples.
	opens()
	lean := a.must("stats", "st", "--json")
	if n := opens(); n != 0 {
		t.Errorf("agentkernel stats opened the state store (%d times)", n)
	}
	fullR := runFull("stats", "--json", "st")
	if opens() == 0 {
		t.Error("agentkernel-full stats did not open the state store: the check above cannot fail")
	}
	var lj, fj any
	if err := json.Unmarshal([]byte(lean.stdout), &lj); err != nil {
		t.Fatalf("agentkernel stats --json: %v\n%s", err, lean.stdout)
	}
	if err := json.Unmarshal([]byte(fullR.stdout), &fj); err != nil {
		t.Fatalf("agentkernel-full stats --json: %v\n%s", err, fullR.stdout)
	}
	sameShape(t, "", lj, fj, map[string]bool{".sandboxes.name": true, ".sandboxes.status": true, ".sandboxes.pids": true,
		".sandboxes.upper_bytes": true, ".host.cpus": true, ".host.memory_total_bytes": true, ".host.sandboxes": true, ".host.running": true})
	var st struct {
		Sandboxes []struct {
			Name        string `json:"name"`
			Status      string `json:"status"`
			MemoryBytes int64  `json:"memory_bytes"`
			UpperBytes  int64  `json:"upper_bytes"`
		} `json:"sandboxes"`
		Host struct {
			Running int `json:"running"`
		} `json:"host"`
	}
	if err := json.Unmarshal([]byte(lean.stdout), &st); err != nil || len(st.Sandboxes) != 1 || st.Sandboxes[0].Name != "st" ||
		st.Sandboxes[0].Status != "running" || st.Sandboxes[0].MemoryBytes <= 0 || st.Sandboxes[0].UpperBytes < 500000 || st.Host.Running != 1 {
		t.Errorf("agentkernel stats --json: %v %s", err, lean.stdout)
	}

	// The table: the same lines, figures aside.
	lean = a.must("stats", "st", "st")
	fullR = runFull("stats", "st", "st")
	if statsShape(lean.stdout) != statsShape(fullR.stdout) || !strings.Contains(lean.stdout, "2 sandboxes, 2 running") {
		t.Errorf("stats tables differ:\nagentkernel:\n%s\nagentkernel-full:\n%s", lean.stdout, fullR.stdout)
	}
	if n := opens(); n == 0 {
		t.Error("agentkernel-full stats did not open the state store")
	}

	// Without agentkernel-full beside it.
	lone := filepath.Join(t.TempDir(), "agentkernel")
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	a.bin = lone
	if r := a.run("stats", "st"); r.code != 0 || !strings.HasPrefix(r.stdout, "NAME ") || !strings.Contains(r.stdout, "\nst ") {
		t.Errorf("stats without agentkernel-full: %v", r)
	}
	if r := a.run("stats"); r.code != 125 || !strings.Contains(r.stderr, "needs agentkernel-full") {
		t.Errorf("stats of every sandbox without agentkernel-full: %v", r)
	}
	a.bin = ""
	if n := opens(); n != 0 {
		t.Errorf("agentkernel stats opened the state store (%d times)", n)
	}

	// Bad input: agentkernel-full's words, exit status 125, no stack.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "../x"}, `sandbox name "../x" contains invalid character '.'`},
		{[]string{"stats", "st", "../../etc"}, `sandbox name "../../etc" contains invalid character '.'`},
		{[]string{"stats", "nosuch"}, `sandbox "nosuch" not found`},
		{[]string{"stats", "--bogus", "st"}, "unknown flag: --bogus"},
	} {
		if r := a.run(c.args...); r.code != 125 || r.stdout != "" || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %v, want %q", c.args, r, c.want)
		}
	}
	// Every sandbox, and a stopped one: agentkernel-full's.
	if r := a.must("stats"); !strings.Contains(r.stdout, "\nst ") || !strings.Contains(r.stdout, "1 sandboxes, 1 running") {
		t.Errorf("stats of every sandbox: %v", r)
	}
	a.must("sandbox", "stop", "st")
	if r := a.must("stats", "st"); !regexp.MustCompile(`\nst +stopped +- +- +- +- `).MatchString(r.stdout) {
		t.Errorf("stats of a stopped sandbox: %v", r)
	}
}

// TestStatsCountsCPU: the CPU time a persistent sandbox's commands used
// shows in stats, from both binaries, also on a cgroup v1 host whose
// cpuacct controller is a hierarchy of its own (not mounted with cpu).
func TestStatsCountsCPU(t *testing.T) {
	a, _ := newSandbox(t, "cpu")
	a.sh("cpu", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	full := filepath.Join(filepath.Dir(binary), "agentkernel-full")
	for _, bin := range []string{"", full} {
		a.bin = bin
		r := a.must("stats", "cpu", "--json")
		var st struct {
			Sandboxes []struct {
				CPUSeconds float64 `json:"cpu_seconds"`
			} `json:"sandboxes"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Sandboxes) != 1 || st.Sandboxes[0].CPUSeconds < 0.1 {
			t.Errorf("stats --json (%s) after a busy loop: %v %s", filepath.Base(bin+"agentkernel"), err, r.stdout)
		}
	}
	a.bin = ""
}
