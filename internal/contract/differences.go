package contract

// differences is the data: every check a backend is known not to pass as
// native does, with why. Adding a row needs its reason; a row whose
// check passes on its backend fails the suite that runs it, so the list
// shrinks as backends improve.
func differences() []Difference {
	const (
		pid1Alone  = "the command is the sandbox's PID 1 (no init of agentkernel's above it), so there is no other process whose status the probe could read: it cannot tell (caps_dangerous and nnp_seccomp_status check the command's own)"
		pid1Mem    = "the command is PID 1 itself: /proc/1/mem is its own memory, never another process's"
		rawSocket  = "permissive keeps the engine's default capabilities, CAP_NET_RAW included, held by the container's root: the socket opens, on the container's own network namespace, which has loopback only (network none)"
		engineDisk = "the writable layer is in the engine's storage on the host's disk, with no limit (the engines refuse [resources] disk_mb); native's in-memory upper layer counts against the memory limit"
	)
	all := []string(nil)
	pm := []string{"permissive", "moderate"}
	mr := []string{"moderate", "restrictive"}
	perm := []string{"permissive"}
	const noEngineSnapshots = "persistent sandboxes on an engine have no snapshots yet: POST /snapshots answers 'not supported' (native's and gvisor's have them), so there is nothing to list, get, restore or delete"
	const noPodSnapshots = "a pod's files are in its node's runtime, not on the server's host: POST /snapshots answers 'not supported' (docs/kubernetes.md), so there is nothing to list, get, restore or delete"
	const noJobSnapshots = "a Nomad job's files are on its node, not on the server's host: POST /snapshots answers 'not supported', so there is nothing to list, get, restore or delete"
	n := func(backend, check, why string) Difference {
		return Difference{Backend: backend, Suite: SuiteNodeSDK, Check: check, Want: Unsupported, Why: why}
	}
	a := func(backend, check string, profiles []string, want, why string) Difference {
		return Difference{Backend: backend, Suite: SuiteAttack, Check: check, Profiles: profiles, Want: want, Why: why}
	}
	return []Difference{
		// gvisor: the command's kernel is gVisor's Sentry. Most of these
		// reach the Sentry's own objects, never the host's: different
		// from native's answer, not an escape. disk_fill is a real gap.
		a(GVisor, "nnp_seccomp_status", []string{"restrictive"}, "allowed", "with no host directory it may write (restrictive: a read-only project), the command runs under no seccomp filter of agentkernel's (Seccomp=0): the Sentry serves its system calls itself, and runsc's own filter confines the Sentry on the host; where it writes one, the Sentry loads the set-id guard"),
		a(GVisor, "keyring", all, "allowed", "the Sentry implements keyrings itself: the key lives in the sandbox's kernel, not the host's"),
		a(GVisor, "unshare_ns", all, "allowed", "namespaces made inside gVisor are the Sentry's, nested in the sandbox: no host namespace is created"),
		a(GVisor, "userns_regain_caps", perm, "allowed", "the user namespace and its tmpfs are the Sentry's, inside the sandbox; the host never sees them"),
		a(GVisor, "ptrace_sibling", mr, "allowed", "ptrace is the Sentry's (no agentkernel seccomp filter inside gVisor): a process can trace only others of its own sandbox"),
		a(GVisor, "ptrace_traceme", mr, "allowed", "as ptrace_sibling: the Sentry's ptrace, within the sandbox"),
		a(GVisor, "ptrace_init", all, "allowed", pid1Mem),
		a(GVisor, "pid1_privileges", all, "error", pid1Alone),
		a(GVisor, "proc_masked_paths", all, "allowed", "/proc/sysrq-trigger is the Sentry's, writable and inert; the host's /proc is never shown"),
		a(GVisor, "proc_sys_write", pm, "allowed", "/proc/sys/net/ipv4/ip_forward is the Sentry's own network stack's, not the host's"),
		a(GVisor, "dmesg", all, "allowed", "syslog(2) reads the Sentry's own short kernel log, not the host's"),
		a(GVisor, "dev_inventory", all, "allowed", "/dev/fuse and /dev/net/tun are devices the Sentry emulates, not the host's"),
		a(GVisor, "disk_fill", pm, "allowed", "the root's writes go to a file on the host's disk in the run's directory (runsc --overlay2), bounded only by [resources] disk_mb, which is unset by default; native's in-memory upper layer counts against the memory limit"),

		// docker and podman: containers of the engine, rootful here.
		a(Docker, "pid1_privileges", all, "error", pid1Alone),
		a(Docker, "ptrace_init", all, "allowed", pid1Mem),
		a(Docker, "raw_socket", perm, "allowed", rawSocket),
		a(Docker, "packet_socket", perm, "allowed", rawSocket),
		a(Docker, "disk_fill", pm, "allowed", engineDisk),
		a(Podman, "pid1_privileges", all, "error", pid1Alone),
		a(Podman, "ptrace_init", all, "allowed", pid1Mem),
		a(Podman, "raw_socket", perm, "allowed", rawSocket),
		a(Podman, "packet_socket", perm, "allowed", rawSocket),
		a(Podman, "disk_fill", pm, "allowed", engineDisk),
		a(Podman, "disk_fill", []string{"restrictive"}, "error", "the memory limit ends the probe filling its tmpfs /tmp (exit 137) before it reports, and podman's API does not say the container was OOM-killed, so the battery cannot tell the limit from a crash"),
		{Backend: Docker, Suite: SuiteAPI, Check: "files written outside /workspace survive stop and start", Want: Differs,
			Why: "start makes a new container: only the copy-on-write /workspace keeps its writable layer from one start to the next, the rest of the container's goes at stop (docs/backends.md)"},
		{Backend: Podman, Suite: SuiteAPI, Check: "files written outside /workspace survive stop and start", Want: Differs,
			Why: "as docker: start makes a new container, and only /workspace's writable layer is kept"},
		{Backend: Kubernetes, Suite: SuiteAPI, Check: "files written outside /workspace survive stop and start", Want: Differs,
			Why: "stop deletes the sandbox's pod and start makes a new one from the image: a pod's files do not outlive it (docs/kubernetes.md)"},
		// The Node SDK's script: the engines' persistent sandboxes have
		// no snapshots yet, so the take is refused and what follows it
		// (list, get, restore, delete of that snapshot) has nothing to
		// act on.
		n(Docker, "takeSnapshot", noEngineSnapshots),
		n(Docker, "listSnapshots and getSnapshot", noEngineSnapshots),
		n(Docker, "restoreSnapshot", noEngineSnapshots),
		n(Docker, "deleteSnapshot", noEngineSnapshots),
		n(Podman, "takeSnapshot", noEngineSnapshots),
		n(Podman, "listSnapshots and getSnapshot", noEngineSnapshots),
		n(Podman, "restoreSnapshot", noEngineSnapshots),
		n(Podman, "deleteSnapshot", noEngineSnapshots),
		n(Kubernetes, "takeSnapshot", noPodSnapshots),
		n(Kubernetes, "listSnapshots and getSnapshot", noPodSnapshots),
		n(Kubernetes, "getSnapshot of an unknown snapshot", "the kubernetes backend keeps no snapshots at all: every /snapshots route answers 501 'not supported', a GET of a name that is not there too, where the other backends answer 404"),
		n(Kubernetes, "restoreSnapshot", noPodSnapshots),
		n(Kubernetes, "deleteSnapshot", noPodSnapshots),
		{Backend: Nomad, Suite: SuiteNodeSDK, Check: "execDetached", Want: Differs,
			Why: "a detached command reports pid 0: it runs on the job's node through Nomad's exec API, which does not say the command's pid"},
		n(Nomad, "takeSnapshot", noJobSnapshots),
		n(Nomad, "listSnapshots and getSnapshot", noJobSnapshots),
		n(Nomad, "restoreSnapshot", noJobSnapshots),
		n(Nomad, "deleteSnapshot", noJobSnapshots),
		{Backend: Nomad, Suite: SuiteAPI, Check: "files written outside /workspace survive stop and start", Want: Differs,
			Why: "stop purges the sandbox's Nomad job, and the node's sandbox, its writable layer with it, ends with the job's task; start registers a new job (docs/nomad.md)"},
	}
}
