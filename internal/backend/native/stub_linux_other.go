//go:build linux && !amd64

package native

import "golang.org/x/sys/unix"

// execStub is empty where no assembled exec stage exists: the init then
// re-executes agentkernel as the exec stage (execMain).
const execStub = ""

// stubForkSyscall stands for the stub's fork(2) in armedLateSyscalls. There
// is no stub here (and arm64 has no fork(2)); clone(2) is what a fork is
// on these architectures.
const stubForkSyscall = unix.SYS_CLONE
