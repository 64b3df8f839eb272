package native

import (
	"fmt"
	"slices"

	"github.com/agentkernel/agentkernel/internal/config"
)

// DegradedError is a run or boot refused because this host cannot give
// one of the sandbox's protections and [security] allow_degraded does not
// name it: the fallback ladder's default for anything that weakens
// isolation (docs/doctor.md).
type DegradedError struct {
	// Protection is config.DegradeCgroups or config.DegradeLandlock.
	Protection string
	// Cause is why the host cannot give it.
	Cause error
}

func (e *DegradedError) Error() string {
	return fmt.Sprintf("refusing to run without %s: %v; %s, or let runs go without it: [security] allow_degraded = [%q] in your user config (~/.config/agentkernel/config.toml); 'agentkernel doctor' shows what this host gives",
		protectionText(e.Protection), e.Cause, Fix(e.Protection), e.Protection)
}

func (e *DegradedError) Unwrap() error { return e.Cause }

// protectionText says what a degradable protection is, for messages.
func protectionText(p string) string {
	switch p {
	case config.DegradeCgroups:
		return "cgroup limits (memory, processes, CPU)"
	case config.DegradeLandlock:
		return "the Landlock filesystem fence"
	}
	return p
}

// Fix is the one command or setting that gives a degradable protection
// back on this kind of host.
func Fix(p string) string {
	switch p {
	case config.DegradeCgroups:
		return "run agentkernel in a cgroup delegated to you: systemd-run --user --scope -p Delegate=yes agentkernel ... (or, on cgroup v1, a memory, pids and cpu cgroup chowned to you)"
	case config.DegradeLandlock:
		return "boot a kernel with Landlock (Linux 5.13 or later, CONFIG_SECURITY_LANDLOCK=y, \"landlock\" in the lsm= boot parameter)"
	}
	return ""
}

// Ladder is the fallback ladder's one step for a protection this host
// cannot give (cause): a warning for the run to print once, where
// allowed (allow_degraded) names it; a *DegradedError otherwise. Runs
// and boots decide with it, and so does 'agentkernel doctor'.
func Ladder(allowed []string, protection string, cause error) (warning string, err error) {
	if slices.Contains(allowed, protection) {
		return fmt.Sprintf("running without %s, as [security] allow_degraded allows: %v", protectionText(protection), cause), nil
	}
	return "", &DegradedError{Protection: protection, Cause: cause}
}
