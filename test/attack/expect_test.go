package attack

import "slices"

// exception is a documented case where a probe is expected to end other
// than "blocked". Everything not listed here must be blocked in every
// profile, as root and rootless. A probe that gets through is a bug in
// the backend: fix the backend, do not add an exception for it. Only
// behaviour that the profile table promises (or that this kernel makes
// impossible to test) belongs here, with the reason.
type exception struct {
	Probe    string
	Profiles []string // nil: every profile
	Modes    []string // nil: root and rootless
	Want     string   // "allowed" or "n-a"
	Why      string
}

// exceptions is the per-profile expectation table, as data.
var exceptions = []exception{
	{
		Probe: "write_root", Profiles: []string{"permissive", "moderate"}, Want: "allowed",
		Why: "permissive and moderate give the sandbox a writable layer of its own (a tmpfs upper dir); the image layers stay unchanged (host check)",
	},
	{
		Probe: "read_home_canary", Profiles: []string{"permissive"}, Want: "allowed",
		Why: "permissive mounts $HOME read-only at /home/user by design (write_home checks it stays read-only)",
	},
	{
		Probe: "ptrace_sibling", Profiles: []string{"permissive"}, Want: "allowed",
		Why: "permissive keeps docker's default seccomp profile, which allows ptrace inside the sandbox (debuggers, strace); moderate and restrictive block it",
	},
	{
		Probe: "ptrace_traceme", Profiles: []string{"permissive"}, Want: "allowed",
		Why: "as ptrace_sibling: debuggers work in permissive",
	},
	{
		Probe: "memory_bomb", Profiles: []string{"permissive"}, Want: "allowed",
		Why: "permissive sets no memory limit (profile table: memory unlimited)",
	},
	{
		Probe: "memory_bomb", Profiles: []string{"moderate", "restrictive"}, Modes: []string{"rootless"}, Want: "allowed",
		Why: "rootless without cgroup delegation (this machine: cgroup v1, no delegation) cannot set a memory limit; the backend warns once and runs without limits (issue 4)",
	},
	{
		Probe: "fork_bomb", Modes: []string{"rootless"}, Want: "allowed",
		Why: "rootless without cgroup delegation cannot set a pids limit; the backend warns and runs without limits (issue 4). The probe stops itself at 5000 processes",
	},
	{
		Probe: "raw_socket", Profiles: []string{"permissive"}, Modes: []string{"rootless"}, Want: "allowed",
		Why: "permissive keeps docker's default capabilities, CAP_NET_RAW included; rootless, the sandbox's user namespace owns its network namespace, so the capability is effective there (only loopback exists). As root the command's nested user namespace owns no namespace and the socket is refused",
	},
	{
		Probe: "packet_socket", Profiles: []string{"permissive"}, Modes: []string{"rootless"}, Want: "allowed",
		Why: "as raw_socket: CAP_NET_RAW over the sandbox's own loopback-only network namespace (rootless only)",
	},
	{
		Probe: "setuid_nnp", Modes: []string{"rootless"}, Want: "n-a",
		Why: "rootless maps only the caller's uid (root inside); uid 1000 does not exist in the sandbox until the backend maps /etc/subuid ranges with newuidmap, so the non-root user the probe needs cannot be set",
	},
}

// expected returns what probe should end as in profile and mode, and why
// when it is an exception.
func expected(probe, profile, mode string) (want, why string) {
	for _, e := range exceptions {
		if e.Probe != probe {
			continue
		}
		if e.Profiles != nil && !slices.Contains(e.Profiles, profile) {
			continue
		}
		if e.Modes != nil && !slices.Contains(e.Modes, mode) {
			continue
		}
		return e.Want, e.Why
	}
	return "blocked", ""
}
