//go:build !linux

package native

import (
	"context"
	"fmt"
	"runtime"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// errNotLinux is every probe's answer off Linux.
var errNotLinux = fmt.Errorf("native backend on %s: %w (it needs Linux namespaces)", runtime.GOOS, sandbox.ErrUnsupported)

// CgroupProbe is what a run would get from cgroups here.
type CgroupProbe struct {
	Layout      string
	Rootless    bool
	Dir         string
	Controllers string
	Err         error
}

// NoCgroups is false off Linux.
func NoCgroups(error) bool { return false }

// ProbeCgroups fails off Linux.
func ProbeCgroups(string) CgroupProbe { return CgroupProbe{Layout: "none", Err: errNotLinux} }

// CgroupLayout is "none" off Linux.
func CgroupLayout() string { return "none" }

// ProbeUserNamespace fails off Linux.
func ProbeUserNamespace(context.Context) (userns, overlay error) { return errNotLinux, errNotLinux }

// ProbeNamespaces fails off Linux.
func ProbeNamespaces(context.Context) error { return errNotLinux }

// ErrCloneRefused is never returned off Linux.
var ErrCloneRefused = fmt.Errorf("creating the namespaces refused")

// The namespaces probe's failures (never off Linux).
var (
	ErrLoopbackRefused = fmt.Errorf("bringing lo up in the new network namespace")
	ErrProcRefused     = fmt.Errorf("mounting a /proc of the new PID namespace")
	ErrHostnameRefused = fmt.Errorf("setting the host name in the new UTS namespace")
	ErrMknodRefused    = fmt.Errorf("making the sandbox's device nodes")
)

// ProbeSeccomp fails off Linux.
func ProbeSeccomp(context.Context) error { return errNotLinux }

// ProbeIDMapped fails off Linux.
func ProbeIDMapped(string) (bool, error) { return false, errNotLinux }

// ProbeTUN fails off Linux.
func ProbeTUN() error { return errNotLinux }

// LandlockABI is 0 off Linux.
func LandlockABI() int { return 0 }
