package gvisor

import (
	"context"
	"os"
	"runtime"
	"strings"
)

// Gaps are what this backend does not do that the native backend does;
// doctor lists them, so that the backend is never silently weaker.
func Gaps() []string {
	gaps := []string{"rootless runs", "the host image", "network without /dev/net/tun (proxy mode)"}
	if runtime.GOARCH != "amd64" {
		gaps = append(gaps, "persistent sandboxes (amd64 only)")
	}
	return gaps
}

// Diagnosis is what doctor says of this backend on this host.
type Diagnosis struct {
	// Runsc is the runsc found ("" when none) and Version its first
	// line of --version.
	Runsc, Version string
	// Problem says why runs cannot use the backend here ("" when they
	// can).
	Problem string
}

// Diagnose finds runsc and checks it as a run would (version), and that
// the caller is root.
func Diagnose(ctx context.Context) Diagnosis {
	var d Diagnosis
	p, err := findRunsc()
	if err != nil {
		d.Problem = err.Error()
		return d
	}
	d.Runsc = p
	if err := checkRunscVersion(ctx, p, &d.Version); err != nil {
		d.Problem = err.Error()
		return d
	}
	if os.Geteuid() != 0 {
		d.Problem = "it runs as root only so far"
	}
	return d
}

// firstLine is s's first line, trimmed.
func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l)
}
