package contract

// differences is the data: every check a backend is known not to pass as
// native does, with why. Adding a row needs its reason; a row whose
// check passes on its backend fails the suite that runs it, so the list
// shrinks as backends improve.
func differences() []Difference {
	all := []string(nil)
	pm := []string{"permissive", "moderate"}
	mr := []string{"moderate", "restrictive"}
	perm := []string{"permissive"}
	a := func(backend, check string, profiles []string, want, why string) Difference {
		return Difference{Backend: backend, Suite: SuiteAttack, Check: check, Profiles: profiles, Want: want, Why: why}
	}
	return []Difference{
		// gvisor: the command's kernel is gVisor's Sentry. Most of these
		// reach the Sentry's own objects, never the host's: different
		// from native's answer, not an escape. The workspace rows and
		// disk_fill are real gaps.
		a(GVisor, "nnp_seccomp_status", all, "allowed", "the command runs under no seccomp filter of agentkernel's (Seccomp=0): the Sentry serves its system calls itself, and runsc's own filter confines the Sentry on the host"),
		a(GVisor, "keyring", all, "allowed", "the Sentry implements keyrings itself: the key lives in the sandbox's kernel, not the host's"),
		a(GVisor, "unshare_ns", all, "allowed", "namespaces made inside gVisor are the Sentry's, nested in the sandbox: no host namespace is created"),
		a(GVisor, "userns_regain_caps", perm, "allowed", "the user namespace and its tmpfs are the Sentry's, inside the sandbox; the host never sees them"),
		a(GVisor, "ptrace_sibling", mr, "allowed", "ptrace is the Sentry's (no agentkernel seccomp filter inside gVisor): a process can trace only others of its own sandbox"),
		a(GVisor, "ptrace_traceme", mr, "allowed", "as ptrace_sibling: the Sentry's ptrace, within the sandbox"),
		a(GVisor, "ptrace_init", all, "allowed", "/proc/1/mem is the sandbox's own init, served by the Sentry: never a host process"),
		a(GVisor, "pid1_privileges", all, "error", "the Sentry's /proc gives the probe no /proc/<pid>/status with the fields it reads, so it cannot tell (caps_dangerous checks the capabilities)"),
		a(GVisor, "proc_masked_paths", all, "allowed", "/proc/sysrq-trigger is the Sentry's, writable and inert; the host's /proc is never shown"),
		a(GVisor, "proc_sys_write", pm, "allowed", "/proc/sys/net/ipv4/ip_forward is the Sentry's own network stack's, not the host's"),
		a(GVisor, "dmesg", all, "allowed", "syslog(2) reads the Sentry's own short kernel log, not the host's"),
		a(GVisor, "dev_inventory", all, "allowed", "/dev/fuse and /dev/net/tun are devices the Sentry emulates, not the host's"),
		a(GVisor, "disk_fill", pm, "allowed", "the root's writes go to a file on the host's disk in the run's directory (runsc --overlay2), bounded only by [resources] disk_mb, which is unset by default; native's in-memory upper layer counts against the memory limit"),
		a(GVisor, "workspace_chown", perm, "allowed", "permissive's read-write project is served by runsc's gofer as host root with no id map: a chown inside gives the host file to the same host ids"),
		a(GVisor, "workspace_setuid", pm, "allowed", "the gofer keeps set-id bits: in permissive a set-user-ID-root file reaches the host project, in moderate its copy-on-write layer"),
		a(GVisor, "check:no set-id file or file capability reaches a host workspace", all, Fails, "as workspace_setuid: permissive's project gets set-user-ID-root files"),
		a(GVisor, "check:no file in a host workspace belongs to another host user", all, Fails, "as workspace_chown: files given to host ids 1000, 1001 and 65534"),

		// docker and podman: containers of the engine.
		{Backend: Docker, Suite: SuiteAPI, Check: "files written outside /workspace survive stop and start", Want: Differs,
			Why: "start makes a new container: only the copy-on-write /workspace keeps its writable layer from one start to the next, the rest of the container's goes at stop (docs/backends.md)"},
		{Backend: Podman, Suite: SuiteAPI, Check: "files written outside /workspace survive stop and start", Want: Differs,
			Why: "as docker: start makes a new container, and only /workspace's writable layer is kept"},
	}
}
