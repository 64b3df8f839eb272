package harness

import "syscall"

// ownMountNamespace starts the process in a mount namespace of its own,
// its mounts private (Go makes the new namespace's mounts private).
func ownMountNamespace(a *syscall.SysProcAttr) { a.Unshareflags |= syscall.CLONE_NEWNS }
