//go:build !linux

package runcli

// ExecuteSandboxCommand answers ErrNeedsFull: persistent sandboxes are
// Linux's.
func (a *App) ExecuteSandboxCommand(argv []string) error { return ErrNeedsFull }
