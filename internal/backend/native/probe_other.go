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

// ProbeSeccomp fails off Linux.
func ProbeSeccomp(context.Context) error { return errNotLinux }

// ProbeIDMapped fails off Linux.
func ProbeIDMapped(string) (bool, error) { return false, errNotLinux }

// ProbeTUN fails off Linux.
func ProbeTUN() error { return errNotLinux }

// LandlockABI is 0 off Linux.
func LandlockABI() int { return 0 }
