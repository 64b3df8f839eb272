//go:build !(linux && amd64)

package prestart

import "syscall"

// Thread is a prestarted sandbox thread; there are none on this platform.
type Thread struct {
	Init Init
}

// Run is never called: Take returns nil here.
func (t *Thread) Run(f func()) {}

// Pending reports false: nothing is prestarted on this platform.
func Pending() bool { return false }

// Take returns nil: nothing is prestarted on this platform.
func Take() *Thread { return nil }

// Give reports false: nothing is prestarted on this platform.
func Give(f func(*Thread)) bool { return false }

// Abandon does nothing on this platform.
func Abandon() {}

// Discard does nothing on this platform.
func Discard() {}

// ForkStub fails: there is no stub on this platform.
func ForkStub(argv0 string, sys *syscall.SysProcAttr) (Init, error) {
	return Init{}, syscall.ENOSYS
}
