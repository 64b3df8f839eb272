//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// armedStubs lists the pre-armed exec stages of the sandbox whose
// supervisor is sup and PID 1 init: children of the supervisor in the
// sandbox's mount namespace but not in its PID namespace.
func armedStubs(sup, init int) []int {
	mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", init))
	pidns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", sup))
	for _, t := range tasks {
		kids, _ := os.ReadFile(t)
		for _, k := range strings.Fields(string(kids)) {
			pid, _ := strconv.Atoi(k)
			m, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
			p, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
			if pid != init && m != "" && m == mnt && p != pidns {
				out = append(out, pid)
			}
		}
	}
	return out
}

// waitArmed waits until the sandbox has exactly one armed exec stage and
// returns its pid.
func waitArmed(t *testing.T, dataDir, name string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sup, init, err := sandboxPids(dataDir, name)
		if err == nil {
			if a := armedStubs(sup, init); len(a) == 1 {
				return a[0]
			} else if len(a) > 1 {
				t.Fatalf("%d armed exec stages: %v", len(a), a)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no armed exec stage in sandbox %s (%v)", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fenceProbe prints what a command's fences are, from inside: its
// /proc/self/status lines that are not about the process's own pid,
// memory or scheduling, its cgroups, its user namespace's maps, and
// whether Landlock refuses making a device node on the root (EACCES)
// where the capability check alone would (EPERM, as under /tmp).
const fenceProbe = `grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Seccomp_filters|SigBlk|SigIgn)' /proc/self/status
cat /proc/self/cgroup /proc/self/uid_map /proc/self/gid_map
mknod /fence-probe c 1 3 2>&1 | sed 's/.*: //'
mknod /tmp/fence-probe c 1 3 2>&1 | sed 's/.*: //'
ulimit -n; pwd`

// TestSandboxExecArmedAttack: a persistent sandbox's pre-armed exec stage
// (the stub waiting for the next command in the sandbox's cgroup and
// namespaces) is out of reach from inside: it has no pid in the
// sandbox's PID namespace, so root in the sandbox can neither see it in
// /proc nor signal it (kill -9 -1) nor ptrace it; and a command it starts
// has exactly the fences of one started by a stub forked for it
// (capabilities, seccomp, no_new_privs, ids and maps, Landlock, cgroups),
// which the test forces by killing the armed stub from the host first.
// At stop it is gone, and the sandbox's cgroup with it.
func TestSandboxExecArmedAttack(t *testing.T) {
	a := newAK(t)
	a.must("sandbox", "create", "armed", "--image", "host", "--memory", "256", "--pids", "64", "--start")
	defer a.run("sandbox", "rm", "--force", "armed")
	stub := waitArmed(t, a.dataDir, "armed")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", stub))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "NSpid:" && len(f) != 2 {
			t.Errorf("the armed stub has a pid in a nested PID namespace: %q", l)
		}
	}

	// From inside, as root: every process it can see, then SIGKILL to
	// every process it may signal, then to the host pid of the stub
	// armed while this command runs (this exec used the first one),
	// which the test passes in through cp (no exec).
	probe := a.cmd(context.Background(), "exec", "armed", "--", "sh", "-c",
		`while [ ! -s /tmp/stubpid ]; do sleep 0.05; done
for p in /proc/[0-9]*; do cut -d' ' -f1,2 $p/stat 2>/dev/null; done
kill -9 -1; kill -9 $(cat /tmp/stubpid) 2>&1; echo end`)
	var probeOut bytes.Buffer
	probe.Stdout, probe.Stderr = &probeOut, &probeOut
	if err := probe.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for waitArmed(t, a.dataDir, "armed") == stub && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stub = waitArmed(t, a.dataDir, "armed")
	pidFile := filepath.Join(t.TempDir(), "stubpid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(stub)), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must("cp", pidFile, "armed:/tmp/stubpid")
	if err := probe.Wait(); err != nil || !strings.Contains(probeOut.String(), "end") {
		t.Fatalf("probe: %v\n%s", err, probeOut.String())
	}
	for _, l := range strings.Split(probeOut.String(), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == strconv.Itoa(stub) {
			t.Errorf("the sandbox sees a process with the armed stub's pid: %q", l)
		}
	}
	if err := syscall.Kill(stub, 0); err != nil {
		t.Fatalf("the armed stub did not survive the sandbox's kill -9 -1 and kill of its pid: %v\n%s", err, probeOut.String())
	}

	// A command from the armed stub (it is used: gone after), then one
	// from a stub forked for it (the armed one killed from the host).
	armedOut := a.must("exec", "armed", "--", "sh", "-c", fenceProbe)
	if err := syscall.Kill(stub, 0); err == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", stub)); !strings.Contains(string(st), ") Z ") {
			t.Fatalf("the armed stub %d is still waiting after an exec: not used?", stub)
		}
	}
	next := waitArmed(t, a.dataDir, "armed")
	if err := syscall.Kill(next, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	forkedOut := a.must("exec", "armed", "--", "sh", "-c", fenceProbe)
	if armedOut.stdout != forkedOut.stdout || armedOut.code != 0 {
		t.Errorf("fences differ\narmed stub:\n%s\nforked stub:\n%s", armedOut.stdout, forkedOut.stdout)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "Permission denied\nOperation not permitted", "CapBnd:\t00000000000000eb"} {
		if !strings.Contains(armedOut.stdout, want) {
			t.Errorf("armed stub's command: no %q in\n%s", want, armedOut.stdout)
		}
	}
	// Another working directory and another user are served too.
	if r := a.must("exec", "-w", "/tmp", "armed", "--", "pwd"); strings.TrimSpace(r.stdout) != "/tmp" {
		t.Errorf("exec -w /tmp: %+v", r)
	}
	if r := a.must("exec", "--user", "65534", "armed", "--", "id", "-u"); strings.TrimSpace(r.stdout) != "65534" {
		t.Errorf("exec --user 65534: %+v", r)
	}
	if r := a.run("exec", "-w", "/nonexistent", "armed", "--", "pwd"); r.code != 125 || !strings.Contains(r.stderr, "/nonexistent") {
		t.Errorf("exec -w /nonexistent: want exit 125 naming the directory, got %+v", r)
	}
	if r := a.run("exec", "armed", "--", "/no/such/command"); r.code != 127 {
		t.Errorf("exec of a missing command: want 127, got %+v", r)
	}

	// Stop: no stub left, the cgroup gone.
	last := waitArmed(t, a.dataDir, "armed")
	// The sandbox's cgroups, as the host sees the armed stub's.
	var cgs []string
	own, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", last))
	for _, l := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || !strings.Contains(f[2], "agentkernel") {
			continue
		}
		ctrl := strings.TrimPrefix(f[1], "name=")
		if f[1] == "" {
			cgs = append(cgs, "/sys/fs/cgroup"+f[2])
		} else {
			cgs = append(cgs, "/sys/fs/cgroup/"+ctrl+f[2])
		}
	}
	if len(cgs) == 0 {
		t.Errorf("the armed stub is in none of the sandbox's cgroups:\n%s", own)
	}
	a.must("sandbox", "stop", "armed")
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", last)); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Errorf("armed stub %d left running after stop", last)
	}
	for _, d := range cgs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left after stop", d)
		}
	}
}
