package prestart

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// namespaces are the calling thread's namespace links.
func namespaces(t *testing.T) map[string]string {
	m := map[string]string{}
	for _, ns := range []string{"mnt", "net", "uts", "ipc", "pid_for_children"} {
		l, err := os.Readlink("/proc/thread-self/ns/" + ns)
		switch {
		case ns == "pid_for_children" && os.IsNotExist(err):
			// A new PID namespace shows no link until its first process.
			l = "a PID namespace without processes"
		case err != nil:
			t.Error(err)
		}
		m[ns] = l
	}
	return m
}

func TestThread(t *testing.T) {
	testenv.RequireRoot(t) // the thread is only made for root
	before, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var wantCPUs unix.CPUSet
	if err := unix.SchedGetaffinity(0, &wantCPUs); err != nil {
		t.Fatal(err)
	}
	begin()
	th := Take()
	if th == nil {
		t.Fatal("no thread was made")
	}
	if Take() != nil {
		t.Fatal("a second Take got a thread too")
	}
	type seen struct {
		tid  int
		ns   map[string]string
		loUp bool
		err  error
	}
	initPid := th.Init.Pid
	if initPid <= 0 {
		t.Fatal("no PID 1 was forked on the thread")
	}
	// The vfork returns once the stub's execve is past its point of no
	// return, a moment before the kernel lays out its argument pages:
	// until then /proc/PID/cmdline reads empty.
	var cmdline []byte
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		cmdline, _ = os.ReadFile("/proc/" + strconv.Itoa(initPid) + "/cmdline")
		if len(cmdline) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if string(cmdline) != "agentkernel:init\x00" {
		t.Errorf("PID 1's command line is %q", cmdline)
	}
	if b, _ := os.ReadFile("/proc/" + strconv.Itoa(initPid) + "/status"); !strings.Contains(string(b), "\nNSpid:\t"+strconv.Itoa(initPid)+"\t1\n") {
		t.Errorf("the stub is not PID 1 of a PID namespace of its own:\n%s", b)
	}
	ch := make(chan seen, 1)
	th.Run(func() {
		defer th.Init.discard() // the work owns PID 1
		s := seen{tid: unix.Gettid(), ns: namespaces(t)}
		// Kept off the main thread's CPU while it unshares, the thread
		// has every CPU back (its children, the command among them,
		// inherit its affinity).
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(0, &got); err != nil || got != wantCPUs {
			t.Errorf("the thread may run on %v CPUs (%v), the process on %v", got.Count(), err, wantCPUs.Count())
		}
		lo, err := net.InterfaceByName("lo")
		s.err = err
		s.loUp = err == nil && lo.Flags&net.FlagUp != 0
		ch <- s
	})
	s := <-ch
	if s.tid == unix.Getpid() {
		t.Error("the thread is the main thread")
	}
	mine := namespaces(t)
	for ns, l := range s.ns {
		if l == mine[ns] {
			t.Errorf("the thread shares the caller's %s namespace (%s)", ns, l)
		}
	}
	if !s.loUp {
		t.Errorf("lo is not up in the thread's network namespace (%v)", s.err)
	}
	// The process keeps its namespaces, and the thread ends once f returns.
	if after, _ := os.Readlink("/proc/self/ns/net"); after != before {
		t.Errorf("the process's network namespace changed: %s, was %s", after, before)
	}
	task := "/proc/self/task/" + strconv.Itoa(s.tid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still exists after its work returned", s.tid)
		}
	}
}

func TestDiscard(t *testing.T) {
	testenv.RequireRoot(t) // the thread is only made for root
	begin()
	Discard()
	if Take() != nil {
		t.Fatal("Take got a discarded thread")
	}
	Discard() // nothing in flight: a no-op

	// A thread given no work kills and reaps its PID 1.
	begin()
	th := Take()
	if th == nil || th.Init.Pid <= 0 {
		t.Fatal("no thread or no PID 1")
	}
	th.Run(nil)
	proc := "/proc/" + strconv.Itoa(th.Init.Pid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(proc); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PID 1 (%d) of a thread given no work is still there", th.Init.Pid)
		}
	}
}

// TestAbandon: before a process execs another program, Abandon ends the
// thread nobody took and returns only once its PID 1 is gone (killed and
// reaped), also when a Discard had already started that.
func TestAbandon(t *testing.T) {
	testenv.RequireRoot(t) // the thread is only made for root
	children := func() []string {
		var all []string
		ents, _ := os.ReadDir("/proc/self/task")
		for _, e := range ents {
			c, _ := os.ReadFile("/proc/self/task/" + e.Name() + "/children")
			all = append(all, strings.Fields(string(c))...)
		}
		return all
	}
	for _, discardFirst := range []bool{false, true} {
		begin()
		if discardFirst {
			Discard()
		}
		Abandon()
		// A child another test of this binary left to be reaped may
		// still show for a moment; one of Abandon's stays.
		c := children()
		for deadline := time.Now().Add(2 * time.Second); len(c) != 0 && time.Now().Before(deadline); c = children() {
			time.Sleep(10 * time.Millisecond)
		}
		if len(c) != 0 {
			var what []string
			for _, pid := range c {
				cl, _ := os.ReadFile("/proc/" + pid + "/cmdline")
				st, _ := os.ReadFile("/proc/" + pid + "/stat")
				what = append(what, fmt.Sprintf("%s %q %q", pid, cl, st))
			}
			t.Errorf("discard first %v: children left after Abandon: %s", discardFirst, strings.Join(what, "; "))
		}
		if Take() != nil {
			t.Errorf("discard first %v: Take got an abandoned thread", discardFirst)
		}
	}
}

// TestTakeWithOneP: with a single P (one CPU, or GOMAXPROCS=1) the
// thread's goroutine and Take's caller share it; Take must not hold it
// while it waits, nor must Give. Run in a child process, which is killed
// if it hangs.
func TestTakeWithOneP(t *testing.T) {
	if os.Getenv("PRESTART_TEST_ONE_P") == "1" {
		runtime.GOMAXPROCS(1)
		begin()
		th := Take()
		if th == nil {
			os.Exit(3)
		}
		th.Run(nil)
		<-*unused.Load() // that thread has ended
		begin()
		done := make(chan bool)
		if !Give(func(th *Thread) { done <- th != nil }) || !<-done {
			os.Exit(4)
		}
		os.Exit(0)
	}
	testenv.RequireRoot(t) // the thread is only made for root
	cmd := exec.Command(os.Args[0], "-test.run=^TestTakeWithOneP$")
	cmd.Env = append(os.Environ(), "PRESTART_TEST_ONE_P=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the child failed: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("Take never returned with GOMAXPROCS=1")
	}
}

// TestGive: the work handed over with Give runs once, on the thread, in
// its namespaces, with PID 1 forked: both when the thread is still being
// made (it goes on with the work itself) and when it already waits.
func TestGive(t *testing.T) {
	testenv.RequireRoot(t) // the thread is only made for root
	mine := namespaces(t)
	for _, waitFirst := range []bool{false, true} {
		begin()
		if waitFirst {
			// Made and delivered: the eventfd Take would read is written.
			for deadline := time.Now().Add(5 * time.Second); len(slot) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the thread was not made in 5 s")
				}
			}
		}
		type seen struct {
			tid  int
			ns   map[string]string
			init int
		}
		ch := make(chan seen, 2)
		if !Give(func(th *Thread) {
			s := seen{tid: unix.Gettid(), ns: namespaces(t)}
			if th != nil {
				s.init = th.Init.Pid
				th.Init.discard()
			}
			ch <- s
		}) {
			t.Fatalf("wait first %v: Give found no thread", waitFirst)
		}
		if Give(func(*Thread) {}) || Take() != nil {
			t.Errorf("wait first %v: the thread was handed out twice", waitFirst)
		}
		var s seen
		select {
		case s = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("wait first %v: the work never ran", waitFirst)
		}
		if s.tid == unix.Getpid() {
			t.Errorf("wait first %v: the work ran on the main thread", waitFirst)
		}
		if s.init <= 0 {
			t.Errorf("wait first %v: no PID 1 was forked", waitFirst)
		}
		for _, ns := range []string{"mnt", "uts", "ipc", "net"} {
			if s.ns[ns] == mine[ns] {
				t.Errorf("wait first %v: the work shares the caller's %s namespace", waitFirst, ns)
			}
		}
		select {
		case <-ch:
			t.Errorf("wait first %v: the work ran twice", waitFirst)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
