package native

import (
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/stub"
)

// execStub is the assembled stub (package stub): the exec stage without
// a Go runtime (see stub_linux.go).
var execStub = stub.Binary

// stubForkSyscall is the system call the armed stub forks the command with
// (armedLateSyscalls).
const stubForkSyscall = unix.SYS_FORK
