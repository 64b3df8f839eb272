package prestart

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/agentkernel/agentkernel/internal/backend/native/stub"
)

// Thread is a locked OS thread in fresh mount, PID, network, IPC and UTS
// namespaces, with its mount tree private and lo up.
type Thread struct {
	// The thread waits for its work in a read of this eventfd, a
	// blocking system call rather than a parked goroutine: the kernel
	// then wakes the thread directly, where a goroutine locked to its
	// thread would be woken by way of another thread and a handoff of
	// the scheduler's P: two wake-ups instead of one.
	efd  int
	work atomic.Pointer[func()]
	// Init is the sandbox's PID 1, forked on the thread (Pid 0 when that
	// failed: Run's work then forks it). Run's work owns it; a discarded
	// thread kills and reaps it.
	Init Init
}

// Run runs f on the thread; the thread ends, namespaces and all, when f
// returns. Run returns at once.
func (t *Thread) Run(f func()) {
	t.work.Store(&f)
	one := [8]byte{1}
	for {
		if _, err := syscall.Write(t.efd, one[:]); err != syscall.EINTR {
			return
		}
	}
}

var (
	inflight atomic.Bool
	slot     = make(chan *Thread, 1)
	// ready is an eventfd written once slot has the thread (or nil). Take
	// waits for it in a raw read: the kernel then wakes the waiting
	// thread directly, which keeps its P, where a goroutine parked on
	// slot would be readied by way of another thread and the scheduler,
	// on the run's critical path when the thread is late.
	ready = -1
	// unused is set when this process started making a thread, to a
	// channel closed once that thread ended without being used
	// (discarded, or its namespaces could not be made).
	unused atomic.Pointer[chan struct{}]
	// current is the hand-off of the thread being made (Give).
	current atomic.Pointer[handoff]
)

// handoff gives a thread its work without a round trip (Give): stage
// goes from making to waiting when the thread is made first, or to given
// when the work comes first, and then the thread runs given as soon as it
// is made. Each thread has its own.
type handoff struct {
	stage atomic.Int32
	given atomic.Pointer[func(*Thread)]
	// mainCPU is the CPU the process's main thread was on when begin
	// ran, or -1 (awayFrom).
	mainCPU int
}

const (
	stageMaking = iota
	stageWaiting
	stageGiven
)

// The imports are only runtime, sync/atomic, syscall and package stub
// (embed and syscall), all of which the runtime initialises first: Go initialises a package as soon
// as it is the lexically first one whose imports are ready, and os or
// golang.org/x/sys/unix would make this one wait for half the binary.
func init() {
	if syscall.Geteuid() != 0 {
		return
	}
	if _, ok := syscall.Getenv("AGENTKERNEL_REEXEC_INIT"); ok {
		return
	}
	args := cmdline()
	if !IsRun(args) || daemonServes(args) || otherBackend(args) {
		return
	}
	begin()
}

// begin starts making the thread.
func begin() {
	h := &handoff{mainCPU: currentCPU()}
	current.Store(h)
	ch := make(chan struct{})
	unused.Store(&ch)
	if fd, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC, 0); errno == 0 {
		ready = int(fd)
	}
	inflight.Store(true)
	go start(ch, h)
}

// cmdline is this process's argv, read without package os (see init).
func cmdline() []string {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var buf [4096]byte // enough to find the subcommand
	n, _ := syscall.Read(fd, buf[:])
	if n <= 0 {
		return nil
	}
	var args []string
	start := 0
	for i, c := range buf[:n] {
		if c == 0 {
			args = append(args, string(buf[start:i]))
			start = i + 1
		}
	}
	return args
}

// start runs on the goroutine that becomes the thread.
func start(unused chan struct{}, h *handoff) {
	runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
	if syscall.Gettid() == syscall.Getpid() {
		// The main thread never ends, so it must never hold a sandbox's
		// namespaces. (During package init the main goroutine holds it,
		// so this only happens when start runs later.) Hold it until
		// another goroutine has a thread of its own.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			serve(unused, h)
		}()
		<-locked
		runtime.UnlockOSThread()
		return
	}
	serve(unused, h)
}

// serve makes the namespaces on the calling (locked) thread and runs the
// work it is then given.
func serve(unused chan struct{}, h *handoff) {
	restore := awayFrom(h.mainCPU)
	unshared, err := prepare()
	restore()
	var t *Thread
	if err == nil {
		t = &Thread{efd: -1}
		t.Init, _ = ForkStub(stub.Argv0Init, &syscall.SysProcAttr{Setsid: true})
	}
	if !h.stage.CompareAndSwap(stageMaking, stageWaiting) {
		// Give handed over the work while the thread was being made:
		// run it now. Without namespaces (t nil) the work makes its
		// own, on this thread, unless this thread is in namespaces
		// half made (lo could not be brought up, as in a container
		// without CAP_NET_ADMIN): then on a fresh one, and this one
		// ends with its goroutine, locked.
		if t == nil && unshared {
			done := make(chan struct{})
			go func() {
				defer close(done)
				(*h.given.Load())(nil)
			}()
			<-done
			return
		}
		(*h.given.Load())(t)
		return
	}
	if t != nil {
		efd, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC, 0)
		if errno != 0 {
			t.Init.discard()
			t = nil
		} else {
			t.efd = int(efd)
		}
	}
	if t == nil {
		close(unused)
		deliver(nil) // Run starts from scratch and reports what fails
		return
	}
	deliver(t)
	var buf [8]byte
	for {
		if _, err := syscall.Read(t.efd, buf[:]); err != syscall.EINTR {
			break
		}
	}
	syscall.Close(t.efd)
	if f := t.work.Load(); f != nil && *f != nil {
		(*f)()
		return
	}
	t.Init.discard()
	close(unused)
}

// deliver hands the thread (nil: none) to Take.
func deliver(t *Thread) {
	slot <- t
	if ready >= 0 {
		one := [8]byte{1}
		for {
			if _, err := syscall.Write(ready, one[:]); err != syscall.EINTR {
				break
			}
		}
	}
}

// sysGetcpu is getcpu(2) on amd64 (package syscall has no name for it).
const sysGetcpu = 309

func currentCPU() int {
	var cpu uint32
	if _, _, errno := syscall.RawSyscall(sysGetcpu, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return -1
	}
	return int(cpu)
}

// cpuMask is a sched_setaffinity(2) mask of up to 1024 CPUs.
type cpuMask [16]uint64

// awayFrom keeps the calling thread off cpu while it unshares the
// namespaces, and returns what gives the thread its CPUs back. The
// thread is woken on the CPU of the main thread that started it, and
// its kernel work there (the network namespace above
// all) kept agentkernel's own start-up waiting, runnable, on that CPU
// while another one idled: the scheduler does not move a thread that
// has just run (it counts as cache-hot). Moving the thread instead
// costs two system calls. Nothing changes on a single CPU, or when
// the affinity cannot be read or set (a cpuset that forbids it).
func awayFrom(cpu int) (restore func()) {
	none := func() {}
	if cpu < 0 || cpu >= 64*len(cpuMask{}) {
		return none
	}
	var all cpuMask
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(all), uintptr(unsafe.Pointer(&all))); errno != 0 {
		return none
	}
	away := all
	away[cpu/64] &^= 1 << (cpu % 64)
	if away == (cpuMask{}) {
		return none // the main thread's CPU is the only one
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(away), uintptr(unsafe.Pointer(&away))); errno != 0 {
		return none
	}
	return func() {
		_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(all), uintptr(unsafe.Pointer(&all)))
	}
}

// ForkStub forks the stub as argv0 with sys, waiting for its script on
// fd 3: the first one a thread forks after unsharing a PID namespace is
// that namespace's PID 1. sys must not ask for Go's Pdeathsig (Go
// compares parent pids after the fork, and a child in a new PID namespace
// sees 0): the script sets it.
func ForkStub(argv0 string, sys *syscall.SysProcAttr) (Init, error) {
	sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return Init{}, err
	}
	var ep [2]int
	if err := syscall.Pipe2(ep[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(sp[0])
		syscall.Close(sp[1])
		return Init{}, err
	}
	closed := ^uintptr(0)
	pid, err := stub.Start(argv0, []uintptr{closed, closed, closed, uintptr(sp[1]), uintptr(ep[1])}, sys)
	syscall.Close(sp[1])
	syscall.Close(ep[1])
	if err != nil {
		syscall.Close(sp[0])
		syscall.Close(ep[0])
		return Init{}, err
	}
	return Init{Pid: pid, Sock: sp[0], Err: ep[0]}, nil
}

// discard kills and reaps an unused PID 1.
func (i Init) discard() {
	if i.Pid <= 0 {
		return
	}
	_ = syscall.Kill(i.Pid, syscall.SIGKILL)
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(i.Pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	syscall.Close(i.Sock)
	syscall.Close(i.Err)
}

func prepare() (unshared bool, err error) {
	if err := syscall.Unshare(syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS); err != nil {
		return false, err
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return true, err
	}
	return true, LoopbackUp()
}

// Pending reports whether a thread is being made or waits to be taken:
// Take would get it.
func Pending() bool { return inflight.Load() }

// Take returns the thread started for this process, waiting for it if it
// is still being made, or nil when there is none (not a `run`, not root,
// already taken, or the namespaces could not be made). Only the first
// call can get it.
func Take() *Thread {
	if !inflight.Swap(false) {
		return nil
	}
	if ready >= 0 {
		// The wait is bounded: the thread delivers, nil or not, as soon
		// as its namespaces and PID 1 are made or have failed. A raw read
		// keeps this goroutine's P, which the thread's goroutine must
		// not need: with a single P (one CPU, GOMAXPROCS=1) it could
		// never run again, and the read would wait for ever. There the
		// read goes through the scheduler.
		read := syscall.RawSyscall
		if runtime.GOMAXPROCS(0) < 2 {
			read = syscall.Syscall
		}
		var buf [8]byte
		for {
			_, _, errno := read(syscall.SYS_READ, uintptr(ready), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
			if errno != syscall.EINTR {
				break
			}
		}
		syscall.Close(ready) // written once, and read
	}
	return <-slot
}

// Give hands f the thread started for this process: f runs on it, with
// the thread (nil when its namespaces could not be made: f makes its
// own, on that thread), as soon as it is made, or at once when it waits
// already. Unlike Take, the caller does not wait for the thread, and a
// thread that comes late goes on with f itself instead of being handed
// to the caller first and then woken again: two wake-ups of a thread on
// another CPU, off the run's critical path. It reports false when there is no thread (not a `run`, not root,
// already taken or given, or delivered as failed): the caller makes its
// own.
func Give(f func(*Thread)) bool {
	h := current.Load()
	if h == nil || !inflight.Swap(false) {
		return false
	}
	h.given.Store(&f)
	if h.stage.Swap(stageGiven) == stageMaking {
		// The thread runs f when it is made; it never delivers, so
		// Take's eventfd is not needed.
		if ready >= 0 {
			syscall.Close(ready)
			ready = -1
		}
		return true
	}
	// The thread is made, or failed, and delivers (it may still be on
	// its way to the slot). ready is left open: the thread may not have
	// written it yet.
	t := <-slot
	if t == nil {
		return false
	}
	t.Run(func() { f(t) })
	return true
}

// Abandon is Discard for a process about to replace itself with another
// program (execve): it waits until the thread has ended and its PID 1 is
// killed and reaped, so that nothing of the sandbox outlives the exec as
// a stray child. It must not be called after a run took the thread.
func Abandon() {
	ch := unused.Load()
	if ch == nil {
		return
	}
	Discard()
	<-*ch
}

// Discard ends the thread if nobody took it yet, without waiting for it
// to be made.
func Discard() {
	if inflight.Swap(false) {
		go func() {
			if t := <-slot; t != nil {
				t.Run(nil)
			}
		}()
	}
}
