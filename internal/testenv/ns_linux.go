package testenv

import (
	"os"
	"syscall"
	"testing"
)

// OtherNamespaces are the ways a process of our uid can stand outside our
// namespaces, by name: a new user namespace (its uid 0 mapped to ours, as
// in a rootless sandbox: SO_PEERCRED still reports our uid), a new PID
// namespace, or both.
var OtherNamespaces = map[string]uintptr{
	"user+pid": syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
	"user":     syscall.CLONE_NEWUSER,
	"pid":      syscall.CLONE_NEWPID,
}

// InNamespaces is the SysProcAttr that starts a child in new namespaces
// (flags from OtherNamespaces), killed with its parent. A new PID
// namespace without a new user namespace needs root: Missing otherwise.
func InNamespaces(t testing.TB, flags uintptr) *syscall.SysProcAttr {
	t.Helper()
	a := &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	if flags&syscall.CLONE_NEWUSER != 0 {
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	} else if os.Geteuid() != 0 {
		Missing(t, "a new PID namespace without a new user namespace needs root")
	}
	return a
}
