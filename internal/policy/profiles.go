package policy

import (
	"fmt"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// WorkspaceDir is where the project directory appears in the sandbox.
const WorkspaceDir = "/workspace"

// HomeDir is where the host $HOME appears (read-only) when a profile or
// [security].mount_home mounts it.
const HomeDir = "/home/user"

// Profile is one column of the profile table (see 'agentkernel profiles').
type Profile struct {
	Name    string `json:"name"`    // canonical name (config.ProfileNames)
	Summary string `json:"summary"` // one line for 'agentkernel profiles'

	// Network is the network policy before mode, config and flags.
	Network sandbox.NetworkMode `json:"network"`
	// Cwd is how the project directory appears at /workspace:
	// config.CwdReadWrite, config.CwdCopyOnWrite or config.CwdNone.
	Cwd config.CwdMount `json:"cwd"`
	// MountHome mounts $HOME read-only at /home/user.
	MountHome bool `json:"mount_home"`
	// PassEnv names the host variables passed in (if set on the host).
	PassEnv []string `json:"pass_env"`
	// ReadOnlyRoot makes the root filesystem read-only (with a tmpfs /tmp).
	ReadOnlyRoot bool `json:"read_only_root"`
	// Capabilities kept; empty (not nil) for none.
	Capabilities []string `json:"capabilities"`
	// Seccomp is the built-in filter.
	Seccomp sandbox.SeccompProfile `json:"seccomp"`
	// Limits; zero means unlimited. CPUPercent is in percent of one core.
	MemoryMB   int64 `json:"memory_mb"`
	PIDs       int64 `json:"pids"`        // limit on processes
	CPUPercent int64 `json:"cpu_percent"` // 100 = one core
}

// SafeEnv is the host environment a profile may pass: no PATH (the
// image's own PATH must win), nothing secret. HOME is special: the host's
// path means nothing inside, so it becomes /home/user when $HOME is
// mounted there and is left to the image otherwise.
func SafeEnv() []string {
	return []string{"HOME", "USER", "LANG", "LC_ALL", "TERM"}
}

// DefaultCapabilities is docker's default container capability set.
func DefaultCapabilities() []string {
	return []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER",
		"CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID",
		"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
		"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
	}
}

// Profiles returns the profile table, most open first. Each call returns
// fresh data the caller may modify.
//
// The moderate CPU limit is 100% of one core: enough for an agent's
// builds and tests to make progress, while a runaway loop cannot take
// the whole machine (upstream's moderate also capped at 100%).
func Profiles() []Profile {
	return []Profile{
		{
			Name:         config.ProfilePermissive,
			Summary:      "trusted code: full network, project read-write, $HOME read-only",
			Network:      sandbox.NetworkFull,
			Cwd:          config.CwdReadWrite,
			MountHome:    true,
			PassEnv:      SafeEnv(),
			Capabilities: DefaultCapabilities(),
			Seccomp:      sandbox.SeccompDefault,
			PIDs:         4096,
		},
		{
			Name:    config.ProfileModerate,
			Summary: "the default: network on, project copy-on-write, few capabilities",
			Network: sandbox.NetworkFull,
			Cwd:     config.CwdCopyOnWrite,
			Capabilities: []string{
				"CAP_CHOWN", "CAP_SETUID", "CAP_SETGID",
				"CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL",
			},
			Seccomp:    sandbox.SeccompNoPtrace,
			MemoryMB:   2048,
			PIDs:       1024,
			CPUPercent: 100,
		},
		{
			Name:         config.ProfileRestrictive,
			Summary:      "untrusted code: no network, no project, read-only root",
			Network:      sandbox.NetworkNone,
			Cwd:          config.CwdNone,
			ReadOnlyRoot: true,
			Capabilities: []string{},
			Seccomp:      sandbox.SeccompAllowlist,
			MemoryMB:     512,
			PIDs:         256,
			CPUPercent:   50,
		},
	}
}

// LookupProfile returns the named profile (case-insensitive); an unknown
// name is an error that lists the valid ones.
func LookupProfile(name string) (Profile, error) {
	n, err := config.ParseProfile(name)
	if err != nil {
		return Profile{}, err
	}
	for _, p := range Profiles() {
		if p.Name == n {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("profile %q has no definition", n) // config and policy disagree
}
