package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"unsafe"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// noPtraceSyscalls are what SeccompNoPtrace denies on top of docker's
// profile: debugging and reading other processes' memory.
var noPtraceSyscalls = []string{"ptrace", "process_vm_readv", "process_vm_writev"}

// allowlistSyscalls is the SeccompAllowlist profile: what busybox sh,
// coreutils, python, node and Go programs need to run, compile and talk
// over loopback, and nothing that administers the machine (no mount,
// no namespaces, no bpf, no keyrings, no ptrace, no kernel modules...).
var allowlistSyscalls = []string{
	"accept", "accept4", "access", "alarm", "arch_prctl", "bind", "brk", "capget",
	"chdir", "chmod", "chown", "clock_getres", "clock_gettime", "clock_nanosleep", "close",
	"close_range", "connect", "copy_file_range", "creat", "dup", "dup2", "dup3",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait",
	"eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat", "faccessat2",
	"fadvise64", "fallocate", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchownat",
	"fcntl", "fdatasync", "flock", "fork", "fstat", "fstatfs", "fsync", "ftruncate", "futex",
	"futex_waitv", "getcwd", "getdents", "getdents64", "getegid", "geteuid", "getgid",
	"getgroups", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid",
	"getpriority", "getrandom", "getresgid", "getresuid", "getrlimit", "getrusage", "getsid",
	"getsockname", "getsockopt", "gettid", "gettimeofday", "getuid", "getxattr", "inotify_add_watch",
	"inotify_init", "inotify_init1", "inotify_rm_watch", "ioctl", "kill", "lchown", "lgetxattr",
	"link", "linkat", "listen", "listxattr", "llistxattr", "lseek", "lstat", "madvise",
	"membarrier", "memfd_create", "mincore", "mkdir", "mkdirat", "mlock", "mmap", "mprotect",
	"mremap", "msync", "munlock", "munmap", "nanosleep", "newfstatat", "open", "openat",
	"pause", "pipe", "pipe2", "poll", "ppoll", "prctl", "pread64", "preadv", "preadv2",
	"prlimit64", "pselect6", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
	"readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg", "rename", "renameat", "renameat2",
	"restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
	"rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo",
	"sched_getaffinity", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
	"sched_get_priority_min", "sched_setaffinity", "sched_yield", "select", "sendfile",
	"sendmmsg", "sendmsg", "sendto", "set_robust_list", "set_tid_address", "setgid",
	"setgroups", "setitimer", "setpgid", "setpriority", "setregid", "setresgid", "setresuid",
	"setreuid", "setsid", "setsockopt", "setuid", "shutdown", "sigaltstack", "socketpair",
	"splice", "stat", "statfs", "statx", "symlink", "symlinkat", "sync", "sync_file_range",
	"sysinfo", "tee", "tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun",
	"timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	"tkill", "truncate", "umask", "uname", "unlink", "unlinkat", "utime", "utimensat",
	"utimes", "vfork", "wait4", "waitid", "write", "writev", "getcpu", "get_robust_list",
}

// syscallEntry is one row of syscallTable.
type syscallEntry struct {
	name string
	nr   uint32
}

// syscallNr looks a syscall up by name in this architecture's table.
func syscallNr(name string) (uint32, bool) {
	i := sort.Search(len(syscallTable), func(i int) bool { return syscallTable[i].name >= name })
	if i < len(syscallTable) && syscallTable[i].name == name {
		return syscallTable[i].nr, true
	}
	return 0, false
}

// Seccomp return values.
const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
	retErrno = unix.SECCOMP_RET_ERRNO
)

// argOp is a comparison of one 64-bit syscall argument.
type argOp int

const (
	opEq argOp = iota
	opNe
	opLt
	opLe
	opGt
	opGe
	opAnySet  // arg & value != 0
	opNoneSet // arg & value == 0
)

// argCond is one argument condition; the conditions of a rule are ANDed.
type argCond struct {
	arg uint32
	op  argOp
	val uint64
}

// seccompRule returns action for syscall nr when every condition holds.
// Rules are tried in order; the first match wins.
type seccompRule struct {
	nr     uint32
	conds  []argCond
	action uint32
}

// compileSeccomp builds the BPF program of a profile for the given
// capability set. extra adds the rules that keep a writable idmapped host
// directory from receiving setuid/setgid files or file capabilities.
//
// The program is generated here rather than with go-seccomp-bpf's
// assembler: that assembler leaves an argument in the accumulator after a
// failed argument check and compares it as a syscall number from then on,
// and its arch package builds maps of five architectures in an init
// function, which every sandbox stage would pay for at start-up.
func compileSeccomp(profile string, caps []string, extra bool) ([]unix.SockFilter, error) {
	rules, err := seccompRules(profile, caps, extra)
	if err != nil {
		return nil, err
	}
	return assemble(rules, seccompDefault)
}

// seccompDefault is what the profiles do with a syscall no rule allows.
const seccompDefault = retErrno | uint32(unix.EPERM)

// seccompRules are the rules compileSeccomp assembles, in order.
func seccompRules(profile string, caps []string, extra bool) ([]seccompRule, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("seccomp filters are not built for %s", runtime.GOARCH)
	}
	var rules []seccompRule
	if extra {
		rules = append(rules, idmapGuards()...)
	}
	switch profile {
	case "default", "default-no-ptrace":
		r, err := dockerRules(caps, profile == "default-no-ptrace")
		if err != nil {
			return nil, err
		}
		rules = append(rules, r...)
	case "allowlist":
		rules = append(rules, allowlistRules()...)
	default:
		return nil, fmt.Errorf("unknown seccomp profile %q", profile)
	}
	return rules, nil
}

// allowlistRules is the allowlist profile: allowlistSyscalls plus clone
// without namespace flags, socket without netlink/packet, and the
// personality queries; everything else fails with EPERM.
func allowlistRules() []seccompRule {
	var rules []seccompRule
	add := func(name string, action uint32, conds ...argCond) {
		if nr, ok := syscallNr(name); ok {
			rules = append(rules, seccompRule{nr: nr, conds: conds, action: action})
		}
	}
	// glibc falls back from clone3 on ENOSYS.
	add("clone3", retErrno|uint32(unix.ENOSYS))
	for _, n := range allowlistSyscalls {
		add(n, retAllow)
	}
	add("clone", retAllow, argCond{0, opNoneSet, nsFlags})
	add("socket", retAllow, argCond{0, opNe, unix.AF_NETLINK}, argCond{0, opNe, unix.AF_PACKET})
	add("personality", retAllow, argCond{0, opEq, 0})
	add("personality", retAllow, argCond{0, opEq, 0xffffffff})
	return rules
}

// nsFlags are clone's namespace flags (CLONE_NEWNS ... CLONE_NEWNET,
// CLONE_NEWCGROUP), as in docker's profile.
const nsFlags = 0x7E020000

// setidBits are S_ISUID|S_ISGID.
const setidBits = 0o6000

// idmapGuards deny creating setuid/setgid files and setting extended
// attributes (file capabilities): with a writable idmapped host directory
// the sandbox's root writes files owned by host root.
func idmapGuards() []seccompRule {
	modeArg := map[string]uint32{
		"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3,
		"creat": 1, "mknod": 1, "mknodat": 2,
	}
	var rules []seccompRule
	for _, name := range sortedKeys(modeArg) {
		if nr, ok := syscallNr(name); ok {
			rules = append(rules, seccompRule{nr: nr, conds: []argCond{{modeArg[name], opAnySet, setidBits}}, action: retErrno | uint32(unix.EPERM)})
		}
	}
	if nr, ok := syscallNr("openat2"); ok {
		rules = append(rules, seccompRule{nr: nr, action: retErrno | uint32(unix.ENOSYS)})
	}
	for _, name := range []string{"setxattr", "lsetxattr", "fsetxattr", "setxattrat"} {
		if nr, ok := syscallNr(name); ok {
			rules = append(rules, seccompRule{nr: nr, action: retErrno | uint32(unix.EPERM)})
		}
	}
	return rules
}

// dockerRules translates docker's default profile, filtered for caps like
// docker does: deny rules first, so that an allow never shadows them.
func dockerRules(caps []string, noPtrace bool) ([]seccompRule, error) {
	full := make([]string, 0, len(caps))
	for _, c := range caps {
		if len(c) < 4 || c[:4] != "CAP_" {
			c = "CAP_" + c
		}
		full = append(full, c)
	}
	prof, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: full}}})
	if err != nil {
		return nil, err
	}
	var deny, allow []seccompRule
	for _, sc := range prof.Syscalls {
		act, ok := action(sc.Action, sc.ErrnoRet, prof.DefaultErrnoRet)
		if !ok {
			continue
		}
		var conds []argCond
		supported := true
		for _, a := range sc.Args {
			c, ok := condition(a)
			if !ok {
				supported = false
				break
			}
			conds = append(conds, c)
		}
		if !supported {
			continue // an unsupported condition: leave the call denied
		}
		for _, name := range sc.Names {
			nr, ok := syscallNr(name)
			if !ok {
				continue
			}
			r := seccompRule{nr: nr, conds: conds, action: act}
			if act == retAllow {
				if noPtrace && slices.Contains(noPtraceSyscalls, name) {
					continue
				}
				allow = append(allow, r)
			} else {
				deny = append(deny, r)
			}
		}
	}
	return append(deny, allow...), nil
}

func action(a specs.LinuxSeccompAction, errnoRet, defErrno *uint) (uint32, bool) {
	switch a {
	case specs.ActAllow:
		return retAllow, true
	case specs.ActErrno:
		e := uint(unix.EPERM)
		if errnoRet != nil {
			e = *errnoRet
		} else if defErrno != nil {
			e = *defErrno
		}
		return retErrno | uint32(e&0xffff), true
	case specs.ActKillProcess, specs.ActKill:
		return retKill, true
	}
	return 0, false
}

func condition(a specs.LinuxSeccompArg) (argCond, bool) {
	c := argCond{arg: uint32(a.Index), val: a.Value}
	switch a.Op {
	case specs.OpEqualTo:
		c.op = opEq
	case specs.OpNotEqual:
		c.op = opNe
	case specs.OpLessThan:
		c.op = opLt
	case specs.OpLessEqual:
		c.op = opLe
	case specs.OpGreaterThan:
		c.op = opGt
	case specs.OpGreaterEqual:
		c.op = opGe
	case specs.OpMaskedEqual:
		// (arg & Value) == ValueTwo: expressible when ValueTwo is 0 (no bit
		// of the mask set) or the mask is one bit that must be set.
		switch {
		case a.ValueTwo == 0:
			c.op = opNoneSet
		case a.ValueTwo == a.Value && a.Value&(a.Value-1) == 0:
			c.op = opAnySet
		default:
			return c, false
		}
	default:
		return c, false
	}
	return c, a.Index < 6
}

// BPF building blocks (classic BPF as seccomp runs it).
const (
	bpfLdAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfRet   = unix.BPF_RET | unix.BPF_K
	bpfJeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJgt   = unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K
	bpfJge   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	// seccomp_data offsets.
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// assemble emits the program: check the architecture, refuse x32, then
// one short block for each syscall whose rules have conditions or an
// action other than allow:
//
//	jeq nr ? next : skip-block
//	<argument checks, each jumping to fail when false>
//	ret action
//	fail: ld nr        (the checks clobbered the accumulator)
//
// then the syscalls allowed outright, as ascending ranges of numbers
// (docker's profile allows 306 syscalls in 32 ranges):
//
//	jgt hi ? next-range : next
//	jge lo ? allow : default
//
// and the default action at the end. Every jump stays within 255
// instructions, the reach of classic BPF's 8-bit jump offsets. Ranges
// keep the program short (about 110 instructions for docker's profile
// instead of 690): the kernel converts, JIT-compiles and, to build its
// per-syscall cache, runs the program for every syscall number when it
// is loaded, and every syscall the sandbox makes runs it again.
func assemble(rules []seccompRule, def uint32) ([]unix.SockFilter, error) {
	prog := []unix.SockFilter{
		{Code: bpfLdAbs, K: offArch},
		{Code: bpfJeq, Jt: 1, K: auditArch},
		{Code: bpfRet, K: retKill},
		{Code: bpfLdAbs, K: offNr},
	}
	if x32Bit != 0 {
		prog = append(prog,
			unix.SockFilter{Code: bpfJge, Jf: 1, K: x32Bit},
			unix.SockFilter{Code: bpfRet, K: retErrno | uint32(unix.ENOSYS)})
	}
	// A syscall whose first rule allows it unconditionally is decided by
	// that rule: the rules after it are never reached.
	allowed := map[uint32]bool{}
	seen := map[uint32]bool{}
	for _, r := range rules {
		if !seen[r.nr] {
			seen[r.nr] = true
			allowed[r.nr] = len(r.conds) == 0 && r.action == retAllow
		}
	}
	seenUncond := map[uint32]bool{}
	for _, r := range rules {
		if allowed[r.nr] || seenUncond[r.nr] {
			continue
		}
		if len(r.conds) == 0 {
			seenUncond[r.nr] = true
			prog = append(prog,
				unix.SockFilter{Code: bpfJeq, Jf: 1, K: r.nr},
				unix.SockFilter{Code: bpfRet, K: r.action})
			continue
		}
		block, err := condBlock(r)
		if err != nil {
			return nil, err
		}
		prog = append(prog, block...)
	}
	var nrs []uint32
	for nr, ok := range allowed {
		if ok {
			nrs = append(nrs, nr)
		}
	}
	slices.Sort(nrs)
	type span struct{ lo, hi uint32 }
	var spans []span
	for _, nr := range nrs {
		if n := len(spans); n > 0 && spans[n-1].hi+1 == nr {
			spans[n-1].hi = nr
		} else {
			spans = append(spans, span{nr, nr})
		}
	}
	if 2*len(spans) > 255 {
		// Too scattered for the ranges' jumps: one block per syscall.
		for _, nr := range nrs {
			prog = append(prog,
				unix.SockFilter{Code: bpfJeq, Jf: 1, K: nr},
				unix.SockFilter{Code: bpfRet, K: retAllow})
		}
		spans = nil
	}
	allowAt := 2 * len(spans) // the "ret allow" after the ranges, relative to their start
	for i, sp := range spans {
		at := 2 * i
		toNext := uint8(1) // the next range's first instruction
		if i == len(spans)-1 {
			toNext = uint8(allowAt + 1 - at - 1) // past the last: default
		}
		prog = append(prog,
			unix.SockFilter{Code: bpfJgt, Jt: toNext, K: sp.hi},
			unix.SockFilter{Code: bpfJge, Jt: uint8(allowAt - at - 2), Jf: uint8(allowAt + 1 - at - 2), K: sp.lo})
	}
	if len(spans) > 0 {
		prog = append(prog, unix.SockFilter{Code: bpfRet, K: retAllow})
	}
	prog = append(prog, unix.SockFilter{Code: bpfRet, K: def})
	if len(prog) > 4096 {
		return nil, errors.New("seccomp program too long")
	}
	return prog, nil
}

// condBlock emits one conditional rule. Jumps are to labels: "fail" (the
// reload at the end of the block) or "pass" (the next condition).
func condBlock(r seccompRule) ([]unix.SockFilter, error) {
	// Each condition compiles to instructions whose jumps go either to
	// the start of the next condition or to the final reload; we write
	// them with placeholders and fix the offsets afterwards.
	const (
		toNext = 1
		toFail = 2
	)
	type ins struct {
		f      unix.SockFilter
		jt, jf int // 0: fall through / literal, toNext, toFail
	}
	var body []ins
	var condEnds []int // index in body where each condition's "next" points
	ld := func(off uint32) ins { return ins{f: unix.SockFilter{Code: bpfLdAbs, K: off}} }
	for _, c := range r.conds {
		lo, hi := offArgs+8*c.arg, offArgs+8*c.arg+4
		vlo, vhi := uint32(c.val), uint32(c.val>>32)
		switch c.op {
		case opEq:
			body = append(body, ld(hi), ins{f: unix.SockFilter{Code: bpfJeq, K: vhi}, jf: toFail},
				ld(lo), ins{f: unix.SockFilter{Code: bpfJeq, K: vlo}, jf: toFail})
		case opNe:
			body = append(body, ld(hi), ins{f: unix.SockFilter{Code: bpfJeq, K: vhi}, jf: toNext},
				ld(lo), ins{f: unix.SockFilter{Code: bpfJeq, K: vlo}, jt: toFail})
		case opAnySet:
			body = append(body, ld(hi), ins{f: unix.SockFilter{Code: bpfJset, K: vhi}, jt: toNext},
				ld(lo), ins{f: unix.SockFilter{Code: bpfJset, K: vlo}, jf: toFail})
		case opNoneSet:
			body = append(body, ld(hi), ins{f: unix.SockFilter{Code: bpfJset, K: vhi}, jt: toFail},
				ld(lo), ins{f: unix.SockFilter{Code: bpfJset, K: vlo}, jt: toFail})
		case opGt, opGe:
			code := uint16(bpfJgt)
			if c.op == opGe {
				code = bpfJge
			}
			body = append(body, ld(hi), ins{f: unix.SockFilter{Code: bpfJgt, K: vhi}, jt: toNext},
				ins{f: unix.SockFilter{Code: bpfJeq, K: vhi}, jf: toFail},
				ld(lo), ins{f: unix.SockFilter{Code: code, K: vlo}, jf: toFail})
		case opLt, opLe:
			// arg < v  <=>  !(arg >= v); arg <= v <=> !(arg > v)
			code := uint16(bpfJge)
			if c.op == opLe {
				code = bpfJgt
			}
			body = append(body, ld(hi), ins{f: unix.SockFilter{Code: bpfJge, K: vhi}, jf: toNext},
				ins{f: unix.SockFilter{Code: bpfJeq, K: vhi}, jf: toFail},
				ld(lo), ins{f: unix.SockFilter{Code: code, K: vlo}, jt: toFail})
		}
		condEnds = append(condEnds, len(body))
	}
	// Layout: [jeq nr] body... [ret action] [ld nr]
	n := len(body)
	failIdx := n + 1 // body, then ret at n, then the reload
	out := make([]unix.SockFilter, 0, n+3)
	out = append(out, unix.SockFilter{Code: bpfJeq, Jf: uint8(n + 2), K: r.nr})
	if n+2 > 255 {
		return nil, errors.New("seccomp rule too long")
	}
	ci := 0
	for i, in := range body {
		for ci < len(condEnds) && condEnds[ci] <= i {
			ci++
		}
		next := condEnds[ci] // start of the next condition (or the ret)
		rel := func(kind int) uint8 {
			switch kind {
			case toNext:
				return uint8(next - i - 1)
			case toFail:
				return uint8(failIdx - i - 1)
			}
			return 0
		}
		f := in.f
		f.Jt, f.Jf = rel(in.jt), rel(in.jf)
		out = append(out, f)
	}
	out = append(out, unix.SockFilter{Code: bpfRet, K: r.action}, unix.SockFilter{Code: bpfLdAbs, K: offNr})
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// filterAllows reports whether the raw seccomp program prog (sock_filter
// records) allows system call nr of this architecture whatever its
// arguments. It is false when the verdict depends on an argument, and
// for any instruction outside the few assemble emits.
func filterAllows(prog []byte, nr uint32) bool {
	n := len(prog) / 8
	var a uint32
	for pc := 0; pc < n; pc++ {
		in := prog[8*pc:]
		code := binary.NativeEndian.Uint16(in)
		jt, jf := int(in[2]), int(in[3])
		k := binary.NativeEndian.Uint32(in[4:])
		jump := func(cond bool) {
			if cond {
				pc += jt
			} else {
				pc += jf
			}
		}
		switch code {
		case bpfLdAbs:
			switch k {
			case offNr:
				a = nr
			case offArch:
				a = auditArch
			default:
				return false // an argument or the instruction pointer
			}
		case bpfJeq:
			jump(a == k)
		case bpfJgt:
			jump(a > k)
		case bpfJge:
			jump(a >= k)
		case bpfJset:
			jump(a&k != 0)
		case bpfRet:
			return k == retAllow
		default:
			return false
		}
	}
	return false
}

// loadSeccomp installs prog on the calling thread (no_new_privs is
// already set). Only this thread execs, so no TSYNC is needed.
// ConfineProcess loads the allowlist profile's filter into every thread
// of the calling process (SECCOMP_FILTER_FLAG_TSYNC): what a process that
// parses a sandbox's traffic on the host (the network helper, netproc)
// may still ask of the kernel, no namespaces, mounts, bpf, keyrings or
// ptrace among it. Every thread must have no_new_privs set.
func ConfineProcess() error {
	filter, err := compileSeccomp("allowlist", nil, false)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	switch {
	case e != 0:
		return fmt.Errorf("loading seccomp filter: %w", e)
	case r != 0:
		return fmt.Errorf("loading seccomp filter: thread %d could not take it", r)
	}
	return nil
}

func loadSeccomp(filter []unix.SockFilter) error {
	if len(filter) == 0 {
		return nil
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if e != 0 {
		return fmt.Errorf("loading seccomp filter: %w", e)
	}
	return nil
}
