package attack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// idrangeUser is a user with a subordinate id range, the kind useradd
// makes for every person on a machine with uidmap installed.
const idrangeUser = "akidranges"

// TestHostIDRanges: root-mode sandboxes run in host ids that no user has
// been delegated and that no other live sandbox uses. The attack is the
// one a local user with a subordinate range has: map the range with
// newuidmap (unshare --map-users) and signal processes running in it.
// Positive control: the same attack signals a process that runs as an id
// of the user's range, as every sandbox's root did when all of them ran
// as host 100000-165535 (useradd's first range).
func TestHostIDRanges(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"unshare", "setpriv", "newuidmap", "newgidmap", "useradd", "usermod"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s is not installed (util-linux, uidmap, passwd)", tool)
		}
	}
	u, ur, gr := subordinateUser(t)

	// Three sandboxes live at once.
	b := native.New(native.Options{DataDir: t.TempDir()})
	defer b.Drain()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	marker := "7" + strconv.Itoa(os.Getpid()%100000)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			spec := &sandbox.Spec{
				Rootfs:   cache.Rootfs{Ref: "host", Host: true},
				Args:     []string{"sleep", marker + strconv.Itoa(i)},
				Hostname: "ids",
				Network:  sandbox.Network{Mode: sandbox.NetworkNone},
				Security: sandbox.Security{Seccomp: sandbox.SeccompDefault, NoNewPrivs: true, Landlock: true},
			}
			_, _ = b.Run(ctx, spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		}(i)
	}
	defer wg.Wait()
	defer cancel()
	pids := map[int]int{} // sandbox → host pid of its sleep
	for deadline := time.Now().Add(20 * time.Second); len(pids) < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil || !strings.HasPrefix(string(cl), "sleep\x00"+marker) {
				continue
			}
			i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(string(cl), "sleep\x00"+marker), "\x00"))
			pids[i], _ = strconv.Atoi(e.Name())
		}
	}
	if len(pids) < 3 {
		t.Fatalf("found %d of 3 sandboxed processes", len(pids))
	}

	// Each runs in a block of its own, clear of every delegated range.
	delegated := delegatedRanges(t)
	seen := map[int]int{}
	for i, pid := range pids {
		uid, gid := procIDs(t, pid)
		if uid < 524288 || gid < 524288 {
			t.Errorf("sandbox %d runs as host %d:%d, below systemd's container range", i, uid, gid)
		}
		for _, r := range delegated {
			if (uid >= r[0] && uid < r[0]+r[1]) || (gid >= r[0] && gid < r[0]+r[1]) {
				t.Errorf("sandbox %d runs as host %d:%d, inside a delegated range %d-%d", i, uid, gid, r[0], r[0]+r[1]-1)
			}
		}
		if j, dup := seen[uid/65536]; dup {
			t.Errorf("sandboxes %d and %d share the host id block of %d", i, j, uid)
		}
		seen[uid/65536] = i
	}

	// The attack: the delegated user maps its whole range and signals.
	attack := func(pid int) (string, error) {
		cmd := exec.Command("setpriv", "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups",
			"unshare", fmt.Sprintf("--map-users=%d,0,%d", ur[0], ur[1]), fmt.Sprintf("--map-groups=%d,0,%d", gr[0], gr[1]),
			"--setuid", "0", "--setgid", "0", "--",
			"sh", "-c", "kill -0 "+strconv.Itoa(pid))
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// Positive control: a process in the user's range is reachable.
	victim := exec.Command("setpriv", "--reuid="+strconv.Itoa(ur[0]), "--regid="+strconv.Itoa(gr[0]), "--clear-groups", "sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()
	// Until setpriv has changed its ids and run sleep, the victim is
	// still root, which no one can signal.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cl, _ := os.ReadFile("/proc/" + strconv.Itoa(victim.Process.Pid) + "/cmdline")
		if uid, _ := procIDs(t, victim.Process.Pid); uid == ur[0] && strings.HasPrefix(string(cl), "sleep\x00") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the control process never ran as host %d", ur[0])
		}
	}
	if out, err := attack(victim.Process.Pid); err != nil {
		t.Fatalf("positive control: %s, mapping its range %d-%d, cannot signal a process running as host %d: %v %s (the attack is broken)",
			idrangeUser, ur[0], ur[0]+ur[1]-1, ur[0], err, out)
	}
	for i, pid := range pids {
		out, err := attack(pid)
		switch {
		case err == nil:
			t.Errorf("%s signalled sandbox %d's process (pid %d) through its subordinate range", idrangeUser, i, pid)
		case !strings.Contains(out, "not permitted"):
			// Only EPERM is a refusal; ESRCH means the target was gone,
			// and the attack proved nothing.
			t.Errorf("sandbox %d (pid %d): the attack was not refused but failed otherwise (%v: %s): it proves nothing", i, pid, err, out)
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			t.Errorf("sandbox %d's process (pid %d) ended during the attack (%v): its refusal proves nothing", i, pid, err)
		}
	}
}

// subordinateUser returns idrangeUser (made when missing) and its first
// subordinate uid and gid ranges (start, count), delegating them when
// useradd did not.
func subordinateUser(t *testing.T) (u *user.User, uids, gids [2]int) {
	t.Helper()
	var err error
	u, err = user.Lookup(idrangeUser)
	if err != nil {
		if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", idrangeUser).CombinedOutput(); err != nil {
			testenv.Missing(t, "cannot create the test user %s: %v %s", idrangeUser, err, out)
		}
		if u, err = user.Lookup(idrangeUser); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		if _, _, ok := rangeOf(f, u); !ok {
			// A range of its own, right after the ranges that exist.
			end := 100000
			for _, r := range delegatedRanges(t) {
				end = max(end, r[0]+r[1])
			}
			arg := "--add-subuids"
			if f == "/etc/subgid" {
				arg = "--add-subgids"
			}
			if out, err := exec.Command("usermod", arg, fmt.Sprintf("%d-%d", end, end+65535), idrangeUser).CombinedOutput(); err != nil {
				testenv.Missing(t, "cannot delegate ids to %s: %v %s", idrangeUser, err, out)
			}
		}
	}
	us, uc, _ := rangeOf("/etc/subuid", u)
	gs, gc, _ := rangeOf("/etc/subgid", u)
	return u, [2]int{us, uc}, [2]int{gs, gc}
}

// rangeOf is u's first range in an /etc/subuid-style file.
func rangeOf(path string, u *user.User) (start, count int, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(p) != 3 || (p[0] != u.Username && p[0] != u.Uid) {
			continue
		}
		s, err1 := strconv.Atoi(p[1])
		c, err2 := strconv.Atoi(p[2])
		if err1 == nil && err2 == nil && c > 0 {
			return s, c, true
		}
	}
	return 0, 0, false
}

// delegatedRanges lists every range of /etc/subuid and /etc/subgid.
func delegatedRanges(t *testing.T) [][2]int {
	t.Helper()
	return readDelegated()
}

// readDelegated lists every range of /etc/subuid and /etc/subgid.
func readDelegated() [][2]int {
	var out [][2]int
	for _, path := range []string{"/etc/subuid", "/etc/subgid"} {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			p := strings.Split(strings.TrimSpace(sc.Text()), ":")
			if len(p) != 3 {
				continue
			}
			s, err1 := strconv.Atoi(p[1])
			c, err2 := strconv.Atoi(p[2])
			if err1 == nil && err2 == nil && c > 0 {
				out = append(out, [2]int{s, c})
			}
		}
		f.Close()
	}
	return out
}

// procIDs is a process's real uid and gid as the host sees them.
func procIDs(t *testing.T, pid int) (uid, gid int) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 1 && f[0] == "Uid:":
			uid, _ = strconv.Atoi(f[1])
		case len(f) > 1 && f[0] == "Gid:":
			gid, _ = strconv.Atoi(f[1])
		}
	}
	return uid, gid
}
