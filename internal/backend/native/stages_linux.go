package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// The stages of building a sandbox: one list, in its one order, run by
// every executor. A stage is named once (its name is what a failure
// report and a stage trace say) and defined once (run: the builder does
// it; pid1: the records PID 1's stub script adds for it; moveIn: the
// builder's part once PID 1 has staged it). An executor only decides
// where each stage runs (where): in the builder itself — the re-executed
// init, or the locked thread of agentkernel (thread_linux.go) —, in PID
// 1's stub script, during agentkernel's start-up (package prestart), or
// not at all; never what a stage does, nor in what order the stages run.
// A new stage (the network, say) is one more entry here and its
// functions.
//
// The exec stage's own steps (bounding set, identity, capabilities,
// working directory, rlimits, no_new_privs, Landlock, seccomp, execve)
// follow the last stage, "starting command", in the exec stage: its
// stub script (stubSetup, stubSeccomp, addStubExec) or, where there is
// no stub, the Go exec stage (fence).
//
// Why this order (see also doc.go): the mount tree is made private
// before anything is mounted, so that nothing propagates to the host;
// the scratch tmpfs exists before PID 1's script stages mounts on it;
// proc of the new PID namespace is mounted before the exec stage is
// forked (its uid_map is written through /proc/<pid>); the exec stage is
// forked early so that it starts while the root is mounted; the cgroup is
// opened while host paths are reachable; pivot_root comes after every
// mount, and the command is released last.

// stageID is a stage's place in the order; 0 is no stage.
type stageID uint8

const (
	stageConfig stageID = iota + 1
	stageIDMaps
	stageNamespaces
	stageScratch
	stagePID1
	stageProcMount
	stageCgroup
	stageExecStart
	stageNetwork
	stageRootfs
	stageProc
	stageDev
	stageSys
	stageTmp
	stageVolumes
	stageResolv
	stageProcess
	stagePivot
	stageCommand
	stageLast = stageCommand
)

// executor is a way of building a sandbox.
type executor uint8

const (
	// byReexec: agentkernel re-executed as the sandbox's PID 1 (rootless,
	// persistent, AGENTKERNEL_REEXEC_INIT=1, architectures without the
	// stub).
	byReexec executor = iota
	// byThread: a locked thread of agentkernel (root, ephemeral and
	// prepared); PID 1 is the stub, forked by the thread into the
	// cgroup.
	byThread
	// byPrestarted: the thread package prestart made, with its
	// namespaces and PID 1 made during agentkernel's start-up.
	byPrestarted
	numExecutors
)

var executorNames = [numExecutors]string{"init", "thread", "thread"}

// placement is where a stage runs for one executor.
type placement uint8

const (
	// notHere: not a stage of this executor (what it does is done
	// otherwise: the parent cloned the init into its namespaces, the
	// re-executed init is PID 1 itself).
	notHere placement = iota
	// inBuilder: the builder runs the stage's run.
	inBuilder
	// atStartup: package prestart did it while agentkernel started.
	atStartup
	// inPID1: PID 1's stub script does it (the stage's pid1 adds the
	// records, stubInitScript); the builder then runs moveIn, if any.
	inPID1
)

// where is one stage's placement for one executor. needs is a stage that
// must have run before this one there (it runs first, out of order, if
// it has not yet): a process forked into the cgroup needs the cgroup.
type where struct {
	at    placement
	needs stageID
}

// stage is one named step of building a sandbox.
type stage struct {
	name   string
	run    func(*initState) error
	pid1   func(s *stubScript, st *pid1Staging)
	moveIn func(*initState) error
	where  [numExecutors]where
}

var (
	builder   = where{at: inBuilder}
	staged    = where{at: inPID1}
	notByInit = where{at: notHere}
)

// stages is the list; stages[id] is stage id. (Set by init: the stages'
// functions consult it.)
var stages [stageLast + 1]stage

func init() { stages = stageList() }

func stageList() [stageLast + 1]stage {
	return [stageLast + 1]stage{
		stageConfig: {name: "reading config", run: (*initState).readConfig,
			where: [numExecutors]where{builder, notByInit, notByInit}},
		stageIDMaps: {name: "mapping ids", run: (*initState).awaitIDMaps,
			where: [numExecutors]where{builder, notByInit, notByInit}},
		stageNamespaces: {name: "creating namespaces", run: (*initState).makeNamespaces,
			where: [numExecutors]where{builder, builder, {at: atStartup}}},
		stageScratch: {name: "preparing scratch space", run: (*initState).prepareScratch,
			where: [numExecutors]where{builder, builder, builder}},
		// The re-executed init is PID 1; on a thread, PID 1 is the stub and
		// gets its script (stubInitScript) here: one forked here is cloned
		// into the cgroup.
		stagePID1: {name: "starting init", run: (*initState).startInitStub,
			where: [numExecutors]where{notByInit, {at: inBuilder, needs: stageCgroup}, builder}},
		stageProcMount: {name: "mounting /proc", run: (*initState).mountFreshProc, pid1: stageProcScript,
			where: [numExecutors]where{builder, staged, staged}},
		stageCgroup: {name: "opening cgroup", run: (*initState).openCgroup,
			where: [numExecutors]where{builder, builder, builder}},
		stageExecStart: {name: "starting exec stage", run: (*initState).startExecStage,
			where: [numExecutors]where{builder, builder, builder}},
		stageNetwork: {name: "setting up network", run: (*initState).setupNetwork,
			where: [numExecutors]where{builder, builder, builder}},
		stageRootfs: {name: "mounting root filesystem", run: (*initState).mountRootfs,
			where: [numExecutors]where{builder, builder, builder}},
		stageProc: {name: "moving /proc into the root", run: (*initState).moveProc, moveIn: (*initState).moveStagedProc,
			where: [numExecutors]where{builder, staged, staged}},
		stageDev: {name: "mounting /dev", run: (*initState).mountDev, pid1: stageDevScript, moveIn: (*initState).moveStagedDev,
			where: [numExecutors]where{builder, staged, staged}},
		stageSys: {name: "mounting /sys", run: (*initState).mountSys, pid1: stageSysScript, moveIn: (*initState).moveStagedSys,
			where: [numExecutors]where{builder, staged, staged}},
		stageTmp: {name: "mounting /tmp and /run", run: (*initState).mountTmp, pid1: stageTmpScript, moveIn: (*initState).moveStagedTmp,
			where: [numExecutors]where{builder, staged, staged}},
		stageVolumes: {name: "mounting volumes", run: (*initState).mountVolumes,
			where: [numExecutors]where{builder, builder, builder}},
		stageResolv: {name: "writing resolv.conf and hosts", run: (*initState).writeResolvConf,
			where: [numExecutors]where{builder, builder, builder}},
		stageProcess: {name: "preparing process", run: (*initState).prepareProcess,
			where: [numExecutors]where{builder, builder, builder}},
		stagePivot: {name: "pivoting root", run: (*initState).pivotRoot,
			where: [numExecutors]where{builder, builder, builder}},
		stageCommand: {name: "starting command", run: (*initState).startCommand,
			where: [numExecutors]where{builder, builder, builder}},
	}
}

// at is where stage id runs for this sandbox's executor.
func (s *initState) at(id stageID) placement { return stages[id].where[s.executor].at }

// runStages runs the stages from..to of s's executor in order, skipping
// those already run. It returns the stage that failed, with its error.
func (s *initState) runStages(from, to stageID) (stageID, error) {
	for id := from; id <= to; id++ {
		if failed, err := s.runStage(id); err != nil {
			return failed, err
		}
	}
	return 0, nil
}

// runStage runs stage id (what needs first) unless it ran already.
func (s *initState) runStage(id stageID) (stageID, error) {
	if s.ran&(1<<id) != 0 {
		return 0, nil
	}
	s.ran |= 1 << id
	st := &stages[id]
	w := st.where[s.executor]
	if w.needs != 0 {
		if failed, err := s.runStage(w.needs); err != nil {
			return failed, err
		}
	}
	var fn func(*initState) error
	switch w.at {
	case inBuilder:
		fn = st.run
	case inPID1:
		fn = st.moveIn
	}
	if fn == nil {
		return 0, nil
	}
	err := fn(s)
	if s.cfg != nil && s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s %s: %s done\n", monotonic(), executorNames[s.executor], st.name)
	}
	if err != nil {
		return id, err
	}
	return 0, nil
}

// stageReport is stage id's failure as the parent gets it: the failure
// a step already reported, or the stage's name and err.
func stageReport(id stageID, err error) *stageFailure {
	var f *stageFailure
	if errors.As(err, &f) {
		return f
	}
	msg := stages[id].name + ": " + err.Error()
	if id == stageNamespaces && errors.Is(err, syscall.EPERM) {
		msg += " (" + namespacesHint + ")"
	}
	return &stageFailure{Stage: id, Msg: msg}
}

// namespacesHint says why root may not make a sandbox's namespaces: what
// 'agentkernel doctor' says of its namespaces check.
const namespacesHint = "root needs CAP_SYS_ADMIN for them, which a container withholds unless it runs with --cap-add SYS_ADMIN or --privileged (docs/containers.md); 'agentkernel doctor' shows what this host gives"

// stageFailure is what the init, the thread or the exec stage reports
// to the parent when building the sandbox or starting its command
// failed. Exec: the command could not be executed (exit 126, or 127 for
// ENOENT) rather than the sandbox built (125).
type stageFailure struct {
	Exec  bool
	Errno syscall.Errno
	Stage stageID // 0 when the exec stage's steps failed
	Msg   string
}

func (f *stageFailure) Error() string { return f.Msg }

// kind is "exec" or "setup", as the agent protocol says.
func (f *stageFailure) kind() string {
	if f.Exec {
		return "exec"
	}
	return "setup"
}

// The report's encoding: a magic byte, flags (bit 0: Exec), the stage,
// the errno (4 bytes), the message's length (4 bytes), all little-endian,
// then the message. It crosses a pipe between processes of the same
// binary; the parent reads it to end of file.
const (
	stageFailureMagic = 0xa7
	stageFailureHdr   = 1 + 1 + 1 + 4 + 4
	// maxFailureMsg bounds a message (and what decode accepts).
	maxFailureMsg = 16 << 10
)

// encode lays f out as the parent's decodeStageFailure reads it.
func (f *stageFailure) encode() []byte {
	msg := f.Msg
	if len(msg) > maxFailureMsg {
		msg = msg[:maxFailureMsg]
	}
	b := make([]byte, stageFailureHdr+len(msg))
	b[0] = stageFailureMagic
	if f.Exec {
		b[1] = 1
	}
	b[2] = byte(f.Stage)
	binary.LittleEndian.PutUint32(b[3:], uint32(f.Errno))
	binary.LittleEndian.PutUint32(b[7:], uint32(len(msg)))
	copy(b[stageFailureHdr:], msg)
	return b
}

// decodeStageFailure reads the first report in b.
func decodeStageFailure(b []byte) (*stageFailure, error) {
	if len(b) < stageFailureHdr || b[0] != stageFailureMagic || b[1]&^1 != 0 {
		return nil, errors.New("malformed failure report from the sandbox")
	}
	n := binary.LittleEndian.Uint32(b[7:])
	if n > maxFailureMsg || uint64(len(b)-stageFailureHdr) < uint64(n) {
		return nil, errors.New("truncated failure report from the sandbox")
	}
	f := &stageFailure{
		Exec:  b[1] == 1,
		Stage: stageID(b[2]),
		Errno: syscall.Errno(binary.LittleEndian.Uint32(b[3:])),
		Msg:   string(b[stageFailureHdr : stageFailureHdr+int(n)]),
	}
	if f.Stage > stageLast {
		return nil, errors.New("malformed failure report from the sandbox")
	}
	return f, nil
}

// errnoOf is the errno err wraps, or 0.
func errnoOf(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return 0
}

// The exec stage's steps, in their one order, after the last stage
// ("starting command"). Each is defined twice over, by necessity: as
// the records of the stub's script (script) and as Go for the exec stage
// where there is no stub (fence); both run the steps in this order.
// stubSetup adds the steps up to Landlock (a prepared sandbox's stub
// runs them before its command is known); stubSeccomp and addStubExec
// the last two, which a prepared sandbox's command brings (and which the
// thread's stub may start early: earlySeccomp).
type execStep struct {
	name string
	// script adds the step to the stub's script; nil where the builder
	// does it for the stub (it resolves the command's path).
	script func(s *stubScript, c *execConfig, keep uint64) error
	// fence does it in the Go exec stage; exec: a failure is the
	// command's (126/127), not the set-up's (125).
	fence func(c *execConfig, keep uint64) error
	exec  bool
}

// Indexes of execSteps.
const (
	stepBoundingSet = iota
	stepIdentity
	stepCapabilities
	stepWorkdir
	stepLimits
	stepResolve
	stepNoNewPrivs
	stepLandlock
	stepSeccomp
	stepExec
	numExecSteps
)

// execSteps is the list; the names are what ARCHITECTURE.md's table
// says.
var execSteps [numExecSteps]execStep

func init() {
	execSteps = [numExecSteps]execStep{
		stepBoundingSet:  {name: "bounding set", script: scriptBoundingSet, fence: fenceBoundingSet},
		stepIdentity:     {name: "identity", script: scriptIdentity, fence: func(c *execConfig, _ uint64) error { return setIdentity(c) }},
		stepCapabilities: {name: "capabilities", script: scriptCapabilities, fence: func(_ *execConfig, keep uint64) error { return setCapabilities(keep) }},
		stepWorkdir:      {name: "working directory", script: scriptWorkdir, fence: fenceWorkdir},
		stepLimits:       {name: "limits", script: scriptLimits, fence: fenceLimits},
		stepResolve:      {name: "resolving the command", fence: fenceResolve, exec: true},
		stepNoNewPrivs:   {name: "no_new_privs", script: scriptNoNewPrivs, fence: fenceNoNewPrivs},
		stepLandlock:     {name: "Landlock", script: scriptLandlock, fence: fenceLandlock},
		stepSeccomp:      {name: "seccomp", script: scriptSeccomp, fence: fenceSeccomp},
		stepExec:         {name: "exec", script: scriptExec, fence: fenceExec, exec: true},
	}
}
