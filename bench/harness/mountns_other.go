//go:build !linux

package harness

import "syscall"

// ownMountNamespace: mount namespaces are Linux's.
func ownMountNamespace(*syscall.SysProcAttr) {}
