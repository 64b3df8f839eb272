//go:build !(linux && amd64)

package stub

import "syscall"

// Start fails: there is no stub on this platform.
func Start(argv0 string, files []uintptr, sys *syscall.SysProcAttr) (int, error) {
	return 0, syscall.ENOSYS
}
