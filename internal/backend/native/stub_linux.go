package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/backend/native/stub"
)

// The stub exec stage (stub/execstub_amd64.S) is the exec stage as ~700
// bytes of machine code: the init computes every system call the exec
// stage would make — bounding set, identity, capset, chdir, rlimit,
// no_new_privs, Landlock, seccomp, execve — as a "syscall script" with
// all pointers resolved for a fixed load address, and the stub just runs
// it. This saves a second Go runtime start per sandbox (page faults and
// every linked package's init). execMain remains the exec stage where no
// stub exists for the architecture.
const (
	stubBase     = 0x7e000000
	stubRes      = 0x7e100000
	stubHeader   = 16      // total length, record count
	stubDataOff  = 0x10000 // records live below, data above
	stubPoke     = 1 << 32
	stubChain    = 2 << 32
	stubFork     = 3 << 32
	stubIgnore   = 1 << 8
	stubRecSize  = 64
	stubMaxBytes = stubRes - stubBase
)

// stubRecord is one system call of the script.
type stubRecord struct {
	nr    uint64
	flags uint64
	args  [6]uint64
	desc  string // what failed, for the error report
	exec  bool   // the final execve: failures are exec errors (126/127)
}

// stubScript accumulates records and the data they point at.
type stubScript struct {
	recs []stubRecord
	data []byte
	// dataOff is where the data starts (stubDataOff when 0). A script
	// of a few records sets it low so that it stays small (it must fit
	// a pipe's buffer when written before the stub runs).
	dataOff int
}

func (s *stubScript) off() int {
	if s.dataOff > 0 {
		return s.dataOff
	}
	return stubDataOff
}

// ref marks an argument as "the result of record i".
type ref int

// add appends a record; arguments are uint64 values or refs.
func (s *stubScript) add(desc string, nr uint64, args ...any) int {
	r := stubRecord{nr: nr, desc: desc}
	for i, a := range args {
		switch v := a.(type) {
		case ref:
			r.flags |= 1 << i
			r.args[i] = uint64(v)
		case uint64:
			r.args[i] = v
		case int:
			r.args[i] = uint64(v)
		case uintptr:
			r.args[i] = uint64(v)
		default:
			panic(fmt.Sprintf("stub argument %T", a))
		}
	}
	s.recs = append(s.recs, r)
	return len(s.recs) - 1
}

// bytes stores b (8-aligned) and returns its address in the stub.
func (s *stubScript) bytes(b []byte) uint64 {
	for len(s.data)%8 != 0 {
		s.data = append(s.data, 0)
	}
	addr := uint64(stubBase + s.off() + len(s.data))
	s.data = append(s.data, b...)
	return addr
}

func (s *stubScript) cstr(str string) uint64 { return s.bytes(append([]byte(str), 0)) }

// strv stores a NULL-terminated array of C strings.
func (s *stubScript) strv(strs []string) uint64 {
	ptrs := make([]uint64, len(strs)+1)
	for i, str := range strs {
		ptrs[i] = s.cstr(str)
	}
	return s.bytes(u64s(ptrs...))
}

func u64s(v ...uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

// encode lays the script out as the stub expects it.
func (s *stubScript) encode() ([]byte, error) {
	if len(s.recs) > (s.off()-stubHeader)/stubRecSize || s.off()+len(s.data) > stubMaxBytes {
		return nil, errors.New("exec stage script too large")
	}
	size := s.off() + len(s.data)
	if len(s.data) == 0 {
		size = stubHeader + stubRecSize*len(s.recs)
	}
	out := make([]byte, size)
	binary.LittleEndian.PutUint64(out, uint64(size))
	binary.LittleEndian.PutUint64(out[8:], uint64(len(s.recs)))
	for i, r := range s.recs {
		off := stubHeader + i*stubRecSize
		binary.LittleEndian.PutUint64(out[off:], r.nr)
		binary.LittleEndian.PutUint64(out[off+8:], r.flags)
		for j, a := range r.args {
			binary.LittleEndian.PutUint64(out[off+16+8*j:], a)
		}
	}
	if len(s.data) > 0 {
		copy(out[s.off():], s.data)
	}
	return out, nil
}

// stubEnterScript is the stub's first script: enter a user namespace of
// its own (nest) and a cgroup namespace, say so on fd 3, and wait for the
// next script. Doing this in the stub rather than with CLONE_NEWUSER lets
// the init fork it the cheap way (vfork); the init writes the id maps in
// between. A non-nil filter is loaded right after the namespaces are
// entered (earlySeccomp): the exec stage then waits for its last script
// with its seccomp filter in place, and loading it (the
// kernel translates the program and precomputes which syscalls it always
// allows) overlaps the mounting of the root instead of delaying the
// command.
func stubEnterScript(nest bool, tasks int, filter []byte) *stubScript {
	// Its data (the cgroup writes' "0", the filter) right after its few
	// records: a few hundred bytes to write and for the stub to read and
	// fault in, not the 64 KiB record area.
	s := &stubScript{dataOff: stubHeader + (6+tasks)*stubRecSize}
	// Set here too, not only by the fork: Go's fork checks that the
	// parent is alive by comparing parent pids, which a stub forked into
	// a PID namespace the parent's thread unshared (thread_linux.go)
	// fails — its parent is outside — so that stub is forked without.
	s.add("parent death signal", unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, int(unix.SIGKILL), 0, 0, 0)
	// Into the sandbox's v1 cgroup, before its cgroup namespace is made:
	// the tasks files come as fds 5, 6, … (cgroup.openTasks).
	for i := 0; i < tasks; i++ {
		s.add("joining cgroup", unix.SYS_WRITE, fdErr+1+i, s.cstr("0"), 1)
	}
	// Whatever agentkernel's caller left open without close-on-exec
	// (runc CVE-2024-21626): a re-executed init closed it already, a
	// thread-built sandbox's stub inherits it from agentkernel.
	i := s.add("closing inherited descriptors", unix.SYS_CLOSE_RANGE, fdErr+1, ^uint64(0), 0)
	s.recs[i].flags |= stubIgnore
	flags := unix.CLONE_NEWCGROUP
	if nest {
		flags |= unix.CLONE_NEWUSER
	}
	s.add("entering namespaces", unix.SYS_UNSHARE, flags)
	if filter != nil {
		addSeccompLoad(s, filter)
	}
	s.add("reporting ready", unix.SYS_WRITE, 3, uint64(stubBase), 1)
	s.add("reading script", stubChain)
	return s
}

// buildStubScript is fence (exec_linux.go) as a script. It runs in the
// init after pivot_root, so paths are the sandbox's.
func buildStubScript(c *execConfig, path string) (*stubScript, error) {
	s, err := buildStubPrefix(c)
	if err != nil {
		return nil, err
	}
	addStubExec(s, c, path)
	return s, nil
}

// stubCompactOff is where a script's data starts when its records fit
// below (nearly always): the script then weighs a few KiB instead of
// the 64 KiB record area plus data, and its write to the stub completes
// at once instead of waiting for the stub to drain a full pipe.
const stubCompactOff = stubHeader + 160*stubRecSize

// buildStubPrefix is the script up to its final execve, which depends on
// nothing but the exec config: a prepared sandbox builds it before its
// command is known. It leaves room for one more record (the execve).
func buildStubPrefix(c *execConfig) (*stubScript, error) {
	s, err := buildStubPrefixAt(c, stubCompactOff)
	if err != nil || len(s.recs)+1 <= (stubCompactOff-stubHeader)/stubRecSize {
		return s, err
	}
	return buildStubPrefixAt(c, 0) // many volumes: many Landlock rules
}

func buildStubPrefixAt(c *execConfig, dataOff int) (*stubScript, error) {
	// Room for the usual records (the bounding set alone is ~40) and data
	// (the seccomp program, the environment) up front: growing them
	// record by record allocated and faulted in a dozen times.
	s := &stubScript{dataOff: dataOff, recs: make([]stubRecord, 0, 128), data: make([]byte, 0, 8<<10)}
	if c.RecvStdio {
		stubRecvStdio(s)
		if c.SandboxPTY {
			// A session leader (forked with setsid) without a terminal
			// takes the one it received.
			s.add("controlling terminal", unix.SYS_IOCTL, 0, unix.TIOCSCTTY, 0)
		}
	}
	if err := stubSetup(s, c); err != nil {
		return nil, err
	}
	stubSeccomp(s, c)
	return s, nil
}

// buildStubPrepared splits a prepared sandbox's exec stage in two. The
// first script, run while the sandbox is prepared, does every step that
// does not need the command (identity, capabilities, working directory,
// no_new_privs, Landlock), reports done on fd 3 and waits for the next
// script. The second, sent with the command, takes the stdio, loads the
// seccomp filter (last, since it may not allow what the steps before
// need) and ends in the execve that addStubExec appends.
func buildStubPrepared(c *execConfig) (setup, rest *stubScript, err error) {
	build := func(dataOff int) (*stubScript, error) {
		s := &stubScript{dataOff: dataOff}
		if err := stubSetup(s, c); err != nil {
			return nil, err
		}
		s.add("reporting set-up done", unix.SYS_WRITE, 3, uint64(stubBase), 1)
		s.add("reading script", stubChain)
		return s, nil
	}
	if setup, err = build(stubCompactOff); err != nil {
		return nil, nil, err
	}
	if len(setup.recs) > (stubCompactOff-stubHeader)/stubRecSize {
		if setup, err = build(0); err != nil { // many volumes: many Landlock rules
			return nil, nil, err
		}
	}
	rest = &stubScript{dataOff: stubCompactOff}
	stubRecvStdio(rest)
	stubSeccomp(rest, c)
	return setup, rest, nil
}

// stubSeccomp loads the seccomp filter (the last step before execve),
// unless the stub's first script did (earlySeccomp).
func stubSeccomp(s *stubScript, c *execConfig) {
	_ = execSteps[stepSeccomp].script(s, c, 0)
}

func scriptSeccomp(s *stubScript, c *execConfig, _ uint64) error {
	if len(c.Filter) > 0 && !c.filterLoaded {
		addSeccompLoad(s, c.Filter)
	}
	return nil
}

func addSeccompLoad(s *stubScript, prog []byte) {
	filter := s.bytes(prog)
	fprog := s.bytes(u64s(uint64(len(prog)/8), filter)) // struct sock_fprog {u16 len; pad; ptr}
	s.add("loading seccomp filter", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, fprog)
}

// stubLateSyscalls are every system call the stub may make after its
// first script: the steps stubSetup, stubRecvStdio and addStubExec
// emit, and the stub's own reads of its next script (read), reports
// (write) and exit on failure (exit_group). TestStubLateSyscalls keeps
// the list complete.
var stubLateSyscalls = []uint32{
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_EXIT_GROUP,
	unix.SYS_FCNTL, unix.SYS_PRCTL, unix.SYS_SETGROUPS, unix.SYS_SETRESGID, unix.SYS_SETRESUID,
	unix.SYS_CAPSET, unix.SYS_CHDIR, unix.SYS_PRLIMIT64,
	unix.SYS_LANDLOCK_CREATE_RULESET, unix.SYS_OPENAT, unix.SYS_LANDLOCK_ADD_RULE, unix.SYS_LANDLOCK_RESTRICT_SELF,
	unix.SYS_CLOSE, unix.SYS_RECVMSG, unix.SYS_EXECVE, unix.SYS_IOCTL,
}

// earlySeccomp returns the seccomp program of the filter message msg
// when the stub may load it in its first script: the program allows
// every later step of the stub whatever its arguments. Docker's profile
// does; the allowlist profile (no capset, no Landlock) does not, and its
// filter keeps coming last.
func earlySeccomp(msg []byte) []byte {
	if len(msg) < 9 || msg[0] != 'F' || (len(msg)-1)%8 != 0 {
		return nil
	}
	prog := msg[1:]
	for _, nr := range stubLateSyscalls {
		if !filterAllows(prog, nr) {
			return nil
		}
	}
	return prog
}

// stubSetup adds the exec stage's steps between its stdio and its
// seccomp filter (execSteps up to Landlock): bounding set, ambient
// capabilities, groups and ids, capset, working directory,
// RLIMIT_NOFILE, no_new_privs, Landlock.
func stubSetup(s *stubScript, c *execConfig) error {
	return stubSetupSteps(s, c, numExecSteps)
}

// stubSetupSteps is stubSetup without the step skip (numExecSteps: none):
// a persistent sandbox's armed stub (persist_armed_linux.go) leaves the
// working directory to the request.
func stubSetupSteps(s *stubScript, c *execConfig, skip int) error {
	s.add("fd flags", unix.SYS_FCNTL, 3, unix.F_SETFD, unix.FD_CLOEXEC)
	s.add("fd flags", unix.SYS_FCNTL, 4, unix.F_SETFD, unix.FD_CLOEXEC)
	keep, err := capMask(c.Caps)
	if err != nil {
		return err
	}
	for k, st := range execSteps[:stepSeccomp] {
		if st.script == nil || k == skip {
			continue
		}
		if err := st.script(s, c, keep); err != nil {
			return err
		}
	}
	return nil
}

func scriptBoundingSet(s *stubScript, _ *execConfig, keep uint64) error {
	last := lastCap()
	for cap := 0; cap <= last; cap++ {
		if keep&(1<<cap) == 0 {
			s.add(descCapDrop, unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, cap)
		}
	}
	i := s.add("clearing ambient capabilities", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	s.recs[i].flags |= stubIgnore
	return nil
}

func scriptIdentity(s *stubScript, c *execConfig, _ uint64) error {
	if !c.NoSetgroups {
		g := make([]byte, 4*len(c.Groups)+4)
		for k, id := range c.Groups {
			binary.LittleEndian.PutUint32(g[4*k:], uint32(id))
		}
		s.add("setgroups", unix.SYS_SETGROUPS, len(c.Groups), s.bytes(g))
	}
	s.add("setgid "+strconv.Itoa(c.GID), unix.SYS_SETRESGID, c.GID, c.GID, c.GID)
	s.add("setuid "+strconv.Itoa(c.UID), unix.SYS_SETRESUID, c.UID, c.UID, c.UID)
	return nil
}

// scriptCapabilities: permitted/effective = keep for root (a non-root
// user has none left after setuid), inheritable empty.
func scriptCapabilities(s *stubScript, c *execConfig, keep uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if c.UID == 0 {
		for k := range data {
			data[k].Permitted = uint32(keep >> (32 * k))
			data[k].Effective = data[k].Permitted
		}
	}
	s.add("capset", unix.SYS_CAPSET,
		s.bytes(unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unsafe.Sizeof(hdr))),
		s.bytes(unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), unsafe.Sizeof(data))))
	return nil
}

func scriptWorkdir(s *stubScript, c *execConfig, _ uint64) error {
	s.add("workdir "+c.Workdir, unix.SYS_CHDIR, s.cstr(c.Workdir))
	return nil
}

func scriptLimits(s *stubScript, c *execConfig, _ uint64) error {
	if c.NoFile > 0 {
		s.add("RLIMIT_NOFILE", unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, s.bytes(u64s(c.NoFile, c.NoFile)), 0)
	}
	return nil
}

func scriptNoNewPrivs(s *stubScript, _ *execConfig, _ uint64) error {
	s.add("no_new_privs", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	return nil
}

func scriptLandlock(s *stubScript, c *execConfig, _ uint64) error {
	if !c.Landlock {
		return nil
	}
	handled := landlockHandled()
	if handled == 0 {
		return nil
	}
	rs := s.add("landlock_create_ruleset", unix.SYS_LANDLOCK_CREATE_RULESET, s.bytes(u64s(handled)), 8, 0)
	for _, rule := range landlockRules(c) {
		if rule.kind == ruleUnknown {
			var st unix.Stat_t
			if statIn(c, rule.path, &st) != nil {
				continue
			}
			rule.kind = ruleFile
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				rule.kind = ruleDir
			}
		}
		access := rule.access & handled
		if rule.kind == ruleFile {
			access &= llFileRW
		}
		desc := "landlock rule " + rule.path
		fd := s.add(desc, unix.SYS_OPENAT, uint64(unix.AT_FDCWD&0xffffffffffffffff), s.cstr(rule.path), unix.O_PATH|unix.O_CLOEXEC, 0)
		attr := s.bytes(u64s(access, 0)) // struct landlock_path_beneath_attr + padding
		s.add(desc, stubPoke, attr+8, ref(fd))
		s.add(desc, unix.SYS_LANDLOCK_ADD_RULE, ref(rs), unix.LANDLOCK_RULE_PATH_BENEATH, attr, 0)
	}
	s.add("landlock_restrict_self", unix.SYS_LANDLOCK_RESTRICT_SELF, ref(rs), 0)
	return nil
}

// addStubExec ends the script with the execve of the command, whose
// path the builder resolved (lookPath).
func addStubExec(s *stubScript, c *execConfig, path string) {
	c.path = path
	_ = execSteps[stepExec].script(s, c, 0)
}

func scriptExec(s *stubScript, c *execConfig, _ uint64) error {
	e := s.add("exec "+c.Args[0], unix.SYS_EXECVE, s.cstr(c.path), s.strv(c.Args), s.strv(c.Env))
	s.recs[e].exec = true
	return nil
}

// stubRecvStdio makes the stub take the command's stdin, stdout and
// stderr from the message that follows its script on fd 3 (a prepared
// sandbox learns them only with its command): with 0-2 closed, the three
// descriptors of an SCM_RIGHTS message are installed at the lowest free
// numbers, which are 0, 1 and 2, in order.
func stubRecvStdio(s *stubScript) {
	for fd := 0; fd < 3; fd++ {
		i := s.add("closing stdio", unix.SYS_CLOSE, fd)
		s.recs[i].flags |= stubIgnore
	}
	buf := s.bytes(make([]byte, 8))
	iov := s.bytes(u64s(buf, 1))
	ctlLen := uint64(unix.CmsgSpace(3 * 4))
	ctl := s.bytes(make([]byte, ctlLen))
	// struct msghdr: name, namelen (+pad), iov, iovlen, control,
	// controllen, flags (+pad).
	hdr := s.bytes(u64s(0, 0, iov, 1, ctl, ctlLen, 0))
	s.add("receiving stdio", unix.SYS_RECVMSG, 3, hdr, 0)
	s.add("receiving stdio", unix.SYS_FCNTL, 2, unix.F_GETFD)
}

// landlockRule is one path the command may read or write.
type landlockRule struct {
	path   string
	access uint64
	kind   int // ruleUnknown: look it up; ruleDir, ruleFile: known to exist
}

const (
	ruleUnknown = iota
	ruleDir
	ruleFile
)

// landlockRules lists the Landlock rules of restrictPaths. What the
// stages made themselves (the root, the mounts under /dev, /tmp, /run,
// the device nodes) are known; volumes are not.
func landlockRules(c *execConfig) []landlockRule {
	rules := []landlockRule{{"/", rootAccess(c), ruleDir}}
	for _, p := range []string{"/tmp", "/run", "/dev/shm", "/dev/pts"} {
		rules = append(rules, landlockRule{p, ^uint64(0), ruleDir})
	}
	for _, p := range c.LandlockRW {
		rules = append(rules, landlockRule{p, ^uint64(0), ruleUnknown})
	}
	for _, p := range []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/pts/ptmx"} {
		rules = append(rules, landlockRule{p, llDevices, ruleFile})
	}
	return rules
}

// startStub forks the stub (stub.Start) with the same process attributes
// the Go exec stage gets except the namespaces, which the stub enters
// itself (stubEnterScript).
func startStub(argv0 string, files []uintptr, sys *syscall.SysProcAttr) (int, error) {
	return stub.Start(argv0, files, sys)
}

// descCapDrop describes a bounding set drop; stubError names the
// capability (the record's second argument), which saves building a
// string per capability for the error that does not happen.
const descCapDrop = "dropping a capability from the bounding set"

// stubError turns the stub's {index, errno} report into the parent's
// failure report.
func stubError(s *stubScript, report []byte) *stageFailure {
	if len(report) < 16 {
		return &stageFailure{Msg: "exec stage failed"}
	}
	idx := binary.LittleEndian.Uint64(report)
	errno := syscall.Errno(binary.LittleEndian.Uint64(report[8:]))
	if idx >= uint64(len(s.recs)) {
		return &stageFailure{Errno: errno, Msg: "exec stage: " + errno.Error()}
	}
	r := s.recs[idx]
	desc := r.desc
	if desc == descCapDrop {
		desc = "dropping capability " + strconv.FormatUint(r.args[1], 10) + " from the bounding set"
	}
	msg := desc + ": " + errno.Error()
	if errno == syscall.EPERM && strings.HasPrefix(desc, "mknod ") {
		msg += " (" + mknodHint + ")"
	}
	return &stageFailure{Exec: r.exec, Errno: errno, Msg: msg}
}

// stubInitScript is the whole life of a sandbox's PID 1 when the parent
// builds the sandbox on a thread of its own (thread_linux.go). While the
// thread mounts the root, it stages on the scratch space what goes on top
// of it: the stages placed in PID 1 (inPID1, stages_linux.go), in their
// order — the PID namespace's proc (only a process inside the namespace
// can mount it) with its sensitive paths covered (procMasks), /dev, a
// sysfs of the sandbox's network namespace with its masks, and the /tmp
// and /run tmpfs; the thread moves them into the root (the stages'
// moveIn). Then it says so on fd 3 and idles until the parent kills it or
// goes away (fd 3 reaches end of file). SIGCHLD ignored makes the kernel
// reap the orphans it inherits, so none stays a zombie; the command
// itself is the parent's child and the parent collects its status. A
// failed step fails the sandbox. These are the same mounts, flags and
// options as mountFreshProc, moveProc, mountDev, mountSys and mountTmp
// make for a re-executed init.
func stubInitScript(scratch string, cfg *initConfig, masks []prestart.Mask) *stubScript {
	if masks == nil {
		masks = append(prestart.LookupMasks("/proc/"), prestart.LookupMasks("/sys/")...)
	}
	s := &stubScript{dataOff: stubHeader + (48+lockdownRecords+len(masks))*stubRecSize}
	s.add("parent death signal", unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, int(unix.SIGKILL), 0, 0, 0)
	i := s.add("closing inherited descriptors", unix.SYS_CLOSE_RANGE, fdErr+1, ^uint64(0), 0)
	s.recs[i].flags |= stubIgnore
	s.add("not dumpable", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	s.add("naming", unix.SYS_PRCTL, unix.PR_SET_NAME, s.cstr("agentkernel-ini"), 0, 0, 0) // ps shows 15 bytes
	s.add("umask", unix.SYS_UMASK, 0)
	st := &pid1Staging{s: s, scratch: scratch, cfg: cfg, masks: masks}
	for id := stageID(1); id <= stageLast; id++ {
		if stages[id].pid1 != nil && stages[id].where[byThread].at == inPID1 {
			stages[id].pid1(s, st)
		}
	}

	// struct sigaction for rt_sigaction: handler SIG_IGN (1), flags,
	// restorer, mask.
	s.add("ignoring SIGCHLD", unix.SYS_RT_SIGACTION, int(unix.SIGCHLD), s.bytes(u64s(1, 0, 0, 0)), 0, 8)
	// The thread goes on with the root as soon as the mounts are
	// staged; the lockdown overlaps that, and the thread waits for its
	// second report only before it lets the command start (pid1Locked).
	s.add("reporting", unix.SYS_WRITE, fdConfig, uint64(stubBase), 1)
	addLockdown(s)
	s.add("reporting locked down", unix.SYS_WRITE, fdConfig, uint64(stubBase), 1)
	s.add("closing error pipe", unix.SYS_CLOSE, fdErr)
	i = s.add("waiting", unix.SYS_READ, fdConfig, s.bytes(make([]byte, 8)), 8)
	s.recs[i].flags |= stubIgnore
	s.add("exiting", unix.SYS_EXIT_GROUP, 0)
	return s
}

// pid1Staging is what the stages' parts of PID 1's script (stage.pid1)
// work with.
type pid1Staging struct {
	s       *stubScript
	scratch string
	cfg     *initConfig
	masks   []prestart.Mask
}

func (p *pid1Staging) mount(desc, src, dst, fstype string, flags uintptr, data string) {
	s := p.s
	args := []any{s.cstr(src), s.cstr(dst), 0, flags, 0}
	if fstype != "" {
		args[2] = s.cstr(fstype)
	}
	if data != "" {
		args[4] = s.cstr(data)
	}
	s.add(desc, unix.SYS_MOUNT, args...)
}

func (p *pid1Staging) mkdir(desc, dir string, mode int) {
	p.s.add(desc, unix.SYS_MKDIRAT, uint64(unix.AT_FDCWD&0xffffffffffffffff), p.s.cstr(dir), mode)
}

// maskUnder covers the masked and read-only paths under prefix (/proc,
// /sys) of the file system staged at dst.
func (p *pid1Staging) maskUnder(prefix, dst string) {
	for _, m := range p.masks {
		rest, ok := strings.CutPrefix(m.Path, prefix)
		if !ok {
			continue
		}
		at := dst + rest
		switch m.Kind {
		case prestart.MaskFile:
			p.mount("masking "+m.Path, "/dev/null", at, "", unix.MS_BIND, "")
		case prestart.MaskDir:
			p.mount("masking "+m.Path, "tmpfs", at, "tmpfs", msMasked, maskDirOpts)
		case prestart.MaskReadOnly:
			p.mount("read-only "+m.Path, at, at, "", unix.MS_BIND|unix.MS_REC, "")
			p.mount("read-only "+m.Path, at, at, "", unix.MS_BIND|unix.MS_REMOUNT|msMasked, "")
		}
	}
}

// stageProcScript is stageProcMount (and stageProc's masks) in PID 1:
// the PID namespace's proc on the scratch space.
func stageProcScript(_ *stubScript, p *pid1Staging) {
	proc := p.scratch + "/proc"
	p.mkdir("mounting /proc", proc, 0o555)
	p.mount("mounting /proc", "proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	p.maskUnder("/proc", proc)
}

// stageDevScript is stageDev in PID 1 (mountDev's file systems, devices
// and links) on the scratch space.
func stageDevScript(s *stubScript, p *pid1Staging) {
	at := uint64(unix.AT_FDCWD & 0xffffffffffffffff)
	dev := p.scratch + "/dev"
	for i, m := range devFileSystems(p.cfg) {
		p.mkdir("mounting /dev"+m.dir, dev+m.dir, int(m.mode))
		p.mount("mounting /dev"+m.dir, m.source, dev+m.dir, m.fstype, m.flags, m.opts)
		if i == 0 {
			for _, d := range devices {
				s.add("mknod /dev/"+d.name, unix.SYS_MKNODAT, at, s.cstr(dev+"/"+d.name), unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor)))
			}
		}
	}
	for _, l := range devLinks {
		s.add("linking /dev/"+l.name, unix.SYS_SYMLINKAT, s.cstr(l.target), at, s.cstr(dev+"/"+l.name))
	}
}

// stageSysScript is stageSys in PID 1: a sysfs of the sandbox's network
// namespace with its masks, on the scratch space.
func stageSysScript(_ *stubScript, p *pid1Staging) {
	sys := p.scratch + "/sys"
	p.mkdir("mounting /sys", sys, 0o555)
	p.mount("mounting /sys", "sysfs", sys, "sysfs", msMasked, "")
	p.maskUnder("/sys", sys)
}

// stageTmpScript is stageTmp in PID 1: the /tmp and /run tmpfs on the
// scratch space.
func stageTmpScript(_ *stubScript, p *pid1Staging) {
	for _, t := range stagedTmpfs(p.cfg) {
		p.mkdir("mounting "+t.dir, p.scratch+t.dir, 0o755)
		p.mount("mounting "+t.dir, "tmpfs", p.scratch+t.dir, "tmpfs", msTmp, t.opts)
	}
}

// lockdownRecords is how many records addLockdown may add: a bounding
// set drop per capability (at most 64), securebits, ambient set,
// capset, no_new_privs and the filter.
const lockdownRecords = 64 + 5

// addLockdown leaves the stub that stays on as a sandbox's PID 1 with
// nothing once its mounts are staged: every capability gone from every
// set (bounding, permitted, effective, inheritable, ambient), securebits
// that keep root from regaining any by execve and lock themselves,
// no_new_privs, and a seccomp filter (pid1Filter) that allows only what
// the rest of its script does. Reaping orphans needs no system call at
// all: with SIGCHLD ignored the kernel does it.
func addLockdown(s *stubScript) {
	last := lastCap()
	for c := 0; c <= last; c++ {
		s.add(descCapDrop, unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c)
	}
	s.add("securebits", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, pid1Securebits, 0, 0, 0)
	i := s.add("clearing ambient capabilities", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	s.recs[i].flags |= stubIgnore
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	s.add("dropping capabilities", unix.SYS_CAPSET,
		s.bytes(unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unsafe.Sizeof(hdr))),
		s.bytes(unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), unsafe.Sizeof(data))))
	s.add("no_new_privs", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if prog := pid1Filter(); prog != nil {
		addSeccompLoad(s, prog)
	}
}

// pid1Securebits are SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP and
// SECBIT_NO_CAP_AMBIENT_RAISE, each with its lock, and SECBIT_KEEP_CAPS
// locked off: uid 0 gains no capability from execve or setuid, ever.
const pid1Securebits = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<6 | 1<<7

// pid1Syscalls are all the stub's script makes after its lockdown: the
// report (write), closing the error pipe, the wait (read), and the exit
// (exit_group; exit, rt_sigreturn and restart_syscall for the kernel's
// own sake).
var pid1Syscalls = []uint32{
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_CLOSE, unix.SYS_EXIT, unix.SYS_EXIT_GROUP,
	unix.SYS_RT_SIGRETURN, unix.SYS_RESTART_SYSCALL,
}

// pid1Filter is the seccomp program of an idle stub PID 1: pid1Syscalls
// allowed, anything else kills it (and with it the sandbox: PID 1 doing
// anything else means something is badly wrong). nil where no filter is
// built for the architecture.
func pid1Filter() []byte {
	if auditArch == 0 {
		return nil
	}
	rules := make([]seccompRule, 0, len(pid1Syscalls))
	for _, nr := range pid1Syscalls {
		rules = append(rules, seccompRule{nr: nr, action: retAllow})
	}
	prog, err := assemble(rules, retKill)
	if err != nil {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(prog)*8)
}

// statIn stats p as the command will see it: in the sandbox's root,
// which is this process's own root unless the script is built outside
// the sandbox (execConfig.inRoot).
func statIn(c *execConfig, p string, st *unix.Stat_t) error {
	if !c.inRoot {
		return unix.Stat(p, st)
	}
	fd, err := openInRoot(c.rootFd, p, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}
