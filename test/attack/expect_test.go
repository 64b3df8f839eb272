package attack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentkernel/agentkernel/internal/contract"
)

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
		Probe: "landlock_fence", Profiles: []string{"permissive", "moderate"}, Want: "allowed",
		Why: "as write_root: a writable root takes new top-level entries, as a docker container's does, and Landlock grants the whole writable layer (device nodes and device ioctls aside); restrictive's root is read-only and Landlock gives it read and execute only",
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
		Why: "rootless without cgroup delegation (this machine: cgroup v1, no delegation) cannot set a memory limit; the backend warns once and runs without limits",
	},
	{
		Probe: "fork_bomb", Modes: []string{"rootless"}, Want: "allowed",
		Why: "rootless without cgroup delegation cannot set a pids limit; the backend warns and runs without limits. The probe stops itself at 5000 processes",
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
//
// mode is a backend's name for the batteries through the other backends
// (TestAttackBackends, as root): that backend's differences from
// internal/contract come first, then native's table for root.
func expected(probe, profile, mode string) (want, why string) {
	if isOtherBackend(mode) {
		if d, ok := contract.Lookup(mode, contract.SuiteAttack, probe, profile); ok {
			return d.Want, mode + ": " + d.Why
		}
	}
	for _, e := range exceptions {
		if e.Probe != probe {
			continue
		}
		if e.Profiles != nil && !slices.Contains(e.Profiles, profile) {
			continue
		}
		if e.Modes != nil && !slices.Contains(e.Modes, mode) && !(isOtherBackend(mode) && slices.Contains(e.Modes, "root")) {
			continue
		}
		return e.Want, e.Why
	}
	return "blocked", ""
}

// isOtherBackend: mode is the battery of a backend other than native.
func isOtherBackend(mode string) bool {
	return mode != contract.Native && slices.Contains(contract.Backends(), mode)
}

// checkExpected says whether host check name is to fail on the battery
// of mode (a difference of that backend), and why.
func checkExpected(mode, name string) (fails bool, why string) {
	if !isOtherBackend(mode) {
		return false, ""
	}
	if d, ok := contract.Lookup(mode, contract.SuiteAttack, "check:"+name, ""); ok && d.Want == contract.Fails {
		return true, d.Why
	}
	return false, ""
}

// probeInfo is what the battery knows of a probe besides its code.
type probeInfo struct {
	// Control says what the probe's positive control (its control
	// function, run on the host outside any sandbox as the battery's kind
	// of user before the battery) proves when it reports "reachable".
	// A sandbox's "blocked" counts as a defence only then.
	Control string
	// Heavy probes load the machine: they run one at a time after the
	// others.
	Heavy bool
	// NA declares where the probe may be not applicable: per kind of user
	// the positive control runs as ("root": the root and root-pool
	// batteries; "rootless"), why, and what the control's detail must
	// show. Anywhere else a control or probe that reports "n-a" fails its
	// row: a target that vanished, or a probe that lost its way, can
	// never pass as "not applicable".
	NA map[string][]naDecl
}

// naDecl is one declared not-applicable case.
type naDecl struct {
	// Why the target may be absent for this kind of user.
	Why string
	// Shows lists texts the control's detail must all contain (the
	// reason, the errno or setting that makes it not applicable): a
	// control that found no target for another reason fails the row.
	Shows []string
}

// Kinds of user the positive controls run as.
const (
	kindRoot     = "root"
	kindRootless = "rootless"
)

// kindOf is the kind of user a battery's controls ran as.
func kindOf(mode string) string {
	if mode == "rootless" {
		return kindRootless
	}
	return kindRoot
}

// naProblem says why a control's "n-a" is not allowed for probe and
// kind, or "" when a declaration matches its detail.
func naProblem(probe, kind, detail string) string {
	decls := probeTable[probe].NA[kind]
	if len(decls) == 0 {
		return fmt.Sprintf("n-a is not declared for %s as %s (probeTable NA): %s", probe, kind, detail)
	}
next:
	for _, d := range decls {
		for _, s := range d.Shows {
			if !strings.Contains(detail, s) {
				continue next
			}
		}
		return ""
	}
	var want []string
	for _, d := range decls {
		want = append(want, fmt.Sprintf("%q", d.Shows))
	}
	return fmt.Sprintf("n-a for a reason not declared for %s as %s (the detail shows none of %s): %s", probe, kind, strings.Join(want, " or "), detail)
}

// na declares one reason for each kind listed; shows are the texts the
// control's detail must contain.
func na(why string, shows []string, kinds ...string) map[string][]naDecl {
	m := map[string][]naDecl{}
	for _, k := range kinds {
		m[k] = append(m[k], naDecl{Why: why, Shows: shows})
	}
	return m
}

// anyOf joins declarations: any one of them may match.
func anyOf(ms ...map[string][]naDecl) map[string][]naDecl {
	out := map[string][]naDecl{}
	for _, m := range ms {
		for k, d := range m {
			out[k] = append(out[k], d...)
		}
	}
	return out
}

// Shorthands for the declarations below.
const (
	r  = kindRoot
	rl = kindRootless
)

func shows(s ...string) []string { return s }

// probeTable has a row for every probe in probes/ (TestProbeTable keeps
// the two in step): adding a probe is its directory and its row here.
var probeTable = map[string]probeInfo{
	"abstract_unix":      {Control: "the host's abstract socket answers with the test's token from the host's network namespace"},
	"bpf":                {Control: "bpf(2) creates a map (root holds CAP_BPF; unprivileged users only where kernel.unprivileged_bpf_disabled=0)", NA: anyOf(na("this kernel has no bpf(2)", shows("this kernel has no bpf"), r, rl), na("kernel.unprivileged_bpf_disabled gives bpf(2) to no unprivileged user", shows("unprivileged_bpf_disabled", "operation not permitted"), rl))},
	"caps_dangerous":     {Control: "the capability scan finds dangerous capabilities in a process outside a sandbox (root's effective set; any bounding set)"},
	"cgroup_escape":      {Control: "cgroup.procs and limit files open for writing outside a sandbox (nothing written)", NA: na("without a delegated cgroup an unprivileged user may write no cgroup file", shows("no cgroup file is writable by this user", "permission denied"), rl)},
	"chroot_escape":      {Control: "the chroot climb reaches the host root and reads the canary (in a user namespace of its own when unprivileged)"},
	"clock_settime":      {Control: "settimeofday and adjtimex get past the CAP_SYS_TIME check (EINVAL for out-of-range values; the clock is never set)", NA: na("CAP_SYS_TIME in the initial user namespace: never an unprivileged user's", shows("needs CAP_SYS_TIME", "operation not permitted"), rl)},
	"cloud_metadata":     {Control: "the attack's dials reach an emulated metadata service at 169.254.169.254:80 in a network namespace of the control's own (nothing is dialled off the machine): the probe finds the address wherever a route to it exists"},
	"core_pattern":       {Control: "kernel.core_pattern opens for writing (nothing written)", NA: na("only root may write core_pattern", shows("only root may write core_pattern", "permission denied"), rl)},
	"dev_disk":           {Control: "one of the host's block or control devices opens read-only", NA: na("the host's disks are root's", shows("this user may open none of the host's disks", "permission denied"), rl)},
	"dev_inventory":      {Control: "the host's /dev holds nodes beyond the minimal set, and the scan lists them", NA: na("a /dev of only the minimal set", shows("this machine's /dev holds only the minimal set"), r, rl)},
	"dev_kvm":            {Control: "/dev/kvm opens and answers KVM_GET_API_VERSION (n-a where the machine has no /dev/kvm)", NA: anyOf(na("machines without /dev/kvm", shows("this machine has no /dev/kvm"), r, rl), na("/dev/kvm not open to this user (its mode or group)", shows("this user may not open /dev/kvm"), rl))},
	"dev_mem":            {Control: "/dev/mem or /dev/kmem reads in the first megabyte, or /dev/port opens (n-a where none exists)", NA: anyOf(na("machines without /dev/mem, /dev/kmem and /dev/port", shows("this machine has no /dev/mem, /dev/kmem or /dev/port"), r, rl), na("the nodes are root's", shows("this user may open none of them"), rl))},
	"disk_fill":          {Control: "scaled down: 64 MiB write through, no RLIMIT_FSIZE, and the filesystem has room beyond the probe's cap", Heavy: true, NA: anyOf(na("a file-size limit outside the sandbox", shows("a file-size limit stops the probe outside a sandbox too"), r, rl), na("less room than the cap", shows("this machine has less room than the probe's cap"), r, rl))},
	"dmesg":              {Control: "syslog(2) or /dev/kmsg reads the kernel log (unprivileged: only where kernel.dmesg_restrict=0)", NA: na("kernel.dmesg_restrict=1 keeps the kernel log from unprivileged users", shows("kernel.dmesg_restrict=1", "syslog: operation not permitted"), rl)},
	"egress_bypass":      {Control: "the attack's own dials reach the test's TCP and UDP listeners from the host (unspecified address, mapped loopback, the host's addresses in mapped form)"},
	"fd_exhaust":         {Control: "the open-files hard limit rises above the one given (needs CAP_SYS_RESOURCE; n-a where no process here has it)", Heavy: true, NA: anyOf(na("raising a hard limit needs CAP_SYS_RESOURCE, which no process here holds (root included on machines that drop it)", shows("this process holds no CAP_SYS_RESOURCE", "operation not permitted"), r, rl), na("the hard limit is already fs.nr_open", shows("already the kernel's fs.nr_open"), r, rl), na("an unprivileged user cannot raise its hard limit", shows("an unprivileged user cannot raise", "operation not permitted"), rl))},
	"fd_leak":            {Control: "a directory descriptor inherited from the host (fd 3, as a careless caller leaks one) reads the host canary"},
	"fork_bomb":          {Control: "scaled down: 64 children start, and no host limit (cgroup pids.max, RLIMIT_NPROC, threads-max) is below the probe's cap", Heavy: true, NA: na("hosts that limit this process below the cap anyway", shows("the host already limits this process below the probe's cap"), r, rl)},
	"hardlink_host":      {Control: "the host canary hard-links (beside itself) and reads through the link", NA: na("fs.protected_hardlinks=1 and a canary this user does not own", shows("fs.protected_hardlinks=1"), rl)},
	"host_proc_visible":  {Control: "the host's /proc shows the victim process"},
	"host_secrets":       {Control: "on the host, the attack as run on the host image reads /etc/shadow (its hash matches) and the other secrets", NA: na("the host's secrets are root's", shows("this user cannot read the host's secrets", "permission denied"), rl)},
	"host_unix_socket":   {Control: "the test's unix socket answers by its host path"},
	"huge_env_argv":      {Control: "scaled down: 1 MiB of argv (under ARG_MAX) reaches the probe and it measures all of it", Heavy: true},
	"io_uring":           {Control: "io_uring_setup(2) makes a ring (n-a where the kernel has none or kernel.io_uring_disabled forbids it)", NA: anyOf(na("kernels without io_uring", shows("this kernel has no io_uring"), r, rl), na("kernel.io_uring_disabled=2", shows("kernel.io_uring_disabled=2"), r, rl), na("kernel.io_uring_disabled=1 keeps it from unprivileged users", shows("kernel.io_uring_disabled=1"), rl))},
	"ioperm":             {Control: "ioperm or iopl grants port access (n-a off x86 or where the kernel has neither)", NA: anyOf(na("kernels without CONFIG_X86_IOPL_IOPERM, or not x86", shows("this kernel has no ioperm/iopl"), r, rl), na("not x86", shows("ioperm and iopl do not exist on"), r, rl), na("CAP_SYS_RAWIO in the initial user namespace", shows("CAP_SYS_RAWIO", "operation not permitted"), rl))},
	"kexec_load":         {Control: "kexec_load and kexec_file_load get past the permission check (EINVAL for an unknown flag; nothing loaded)", NA: anyOf(na("kernels without kexec", shows("this kernel has no kexec"), r, rl), na("kernel.kexec_load_disabled=1", shows("kernel.kexec_load_disabled=1"), r), na("CAP_SYS_BOOT in the initial user namespace", shows("CAP_SYS_BOOT", "operation not permitted"), rl))},
	"keyring":            {Control: "add_key puts a key in the process keyring", NA: na("kernels without keys", shows("this kernel has no keyring"), r, rl)},
	"landlock_fence":     {Control: "a directory, file and symlink are created in a directory this user may write (in the sandbox Landlock alone refuses them)"},
	"memory_bomb":        {Control: "scaled down: a child allocates 64 MiB, and neither memory cgroups nor MemAvailable bound this process below the probe's cap", Heavy: true, NA: na("hosts that bound this process below the cap anyway", shows("the host already bounds this process below the probe's cap"), r, rl)},
	"mknod_dev":          {Control: "mknod makes a character device node (c 1:5) that reads through to its device", NA: na("CAP_MKNOD in the initial user namespace", shows("CAP_MKNOD", "operation not permitted"), rl)},
	"module_load":        {Control: "finit_module, init_module or delete_module get past the capability check (empty image, no such module)", NA: anyOf(na("kernels without loadable modules", shows("this kernel has no loadable modules"), r, rl), na("kernel.modules_disabled=1", shows("kernel.modules_disabled=1"), r), na("CAP_SYS_MODULE in the initial user namespace", shows("CAP_SYS_MODULE", "operation not permitted"), rl))},
	"mount_fs":           {Control: "a tmpfs (or the next filesystem) mounts in a private mount namespace of its own"},
	"net_egress":         {Control: "the test's listener answers on the host's non-loopback addresses", NA: na("machines with no non-loopback address", shows("this machine has no non-loopback address"), r, rl)},
	"net_host_loopback":  {Control: "the test's listener answers on the host's loopback"},
	"nnp_seccomp_status": {Control: "outside a sandbox no_new_privs and a seccomp filter are absent, and the check tells so", NA: na("a test process that already runs under no_new_privs and seccomp (a container) cannot tell", shows("already runs with no_new_privs and a seccomp filter"), r, rl)},
	"pid1_privileges":    {Control: "the host's own PID 1 holds capabilities, and the same read (every thread of PID 1 and of every other visible process; a missing field counts as held) reports them"},
	"open_by_handle_at":  {Control: "open_by_handle_at opens a file by handle (CAP_DAC_READ_SEARCH)", NA: na("CAP_DAC_READ_SEARCH in the initial user namespace", shows("CAP_DAC_READ_SEARCH", "operation not permitted"), rl)},
	"output_flood":       {Control: "scaled down: the probe floods a pipe with the 16 MiB it says it wrote", Heavy: true},
	"packet_socket":      {Control: "an AF_PACKET socket opens (root: host network namespace; unprivileged: one of its own)", NA: na("kernels without AF_PACKET", shows("this kernel has no AF_PACKET"), r, rl)},
	"perf_event_open":    {Control: "perf_event_open opens a software event on itself", NA: anyOf(na("kernels without software perf events", shows("this kernel has no software perf events"), r, rl), na("kernel.perf_event_paranoid refuses perf events to unprivileged users", shows("kernel.perf_event_paranoid"), rl))},
	"pivot_root":         {Control: "pivot_root gets past its capability check, or open_tree clones / (private mount namespace of its own)"},
	"proc_kcore":         {Control: "/proc/kcore reads or /proc/kallsyms shows addresses", NA: anyOf(na("kernel.kptr_restrict and root-only /proc/kcore", shows("the kernel shows neither to this user"), rl), na("kernel.kptr_restrict=2 and no /proc/kcore", shows("kernel.kptr_restrict=2 and no /proc/kcore"), r, rl))},
	"proc_masked_paths":  {Control: "the host's /proc/timer_list, keys, sched_debug, … read", NA: na("the masked files are root's", shows("this user can read none of them", "permission denied"), rl)},
	"proc_root_escape":   {Control: "the walk of /proc/<pid>/root reaches the host canary"},
	"proc_sys_write":     {Control: "a sysctl of the list opens for writing (root: host-wide; unprivileged: namespaced ones of its own namespaces; nothing written)"},
	"ptrace_init":        {Control: "the attack seizes PID 1 of a PID namespace of its own (never the host's init)"},
	"ptrace_sibling":     {Control: "the attack seizes its own child"},
	"ptrace_traceme":     {Control: "a child starts under PTRACE_TRACEME"},
	"raw_socket":         {Control: "a raw socket opens (root: host network namespace; unprivileged: one of its own)"},
	"read_data_dir":      {Control: "the data directory's canary reads"},
	"read_home_canary":   {Control: "the $HOME canary reads by its host path"},
	"read_host_canary":   {Control: "the host canary reads by its host path"},
	"read_other_upper":   {Control: "the other sandbox's secret reads where the test found it from the host: that sandbox is up and the secret is there"},
	"reboot":             {Control: "reboot(2) with wrong magic numbers gets past CAP_SYS_BOOT in the host's PID namespace (EINVAL; nothing happens)", NA: na("CAP_SYS_BOOT in the initial user namespace", shows("needs CAP_SYS_BOOT"), rl)},
	"remount_rw":         {Control: "a read-only bind of a tmpfs of its own is remounted read-write (private mount namespace)"},
	"sethostname":        {Control: "sethostname and setdomainname succeed in a throwaway UTS namespace"},
	"setns":              {Control: "setns enters namespaces the control holds"},
	"setuid_nnp":         {Control: "uid 65534 running a set-user-ID-root copy of the probe gets euid 0 (root only; the copy is reachable only through a descriptor)", NA: na("only root can make a set-user-ID-root file", shows("only root can make a set-user-ID-root file"), rl)},
	"signal_host":        {Control: "the victim is at its host pid and may be signalled (signal 0: nothing sent)"},
	"sigterm_ignore":     {Control: "the attack outlives SIGTERM (in a PID namespace of its own, whose end takes it)", Heavy: true},
	"swapon":             {Control: "swapon and swapoff of a missing file get past the capability check (ENOENT)", NA: na("CAP_SYS_ADMIN in the initial user namespace", shows("swap needs CAP_SYS_ADMIN", "swapon: operation not permitted; swapoff: operation not permitted"), rl)},
	"symlink_workspace":  {Control: "symlinks planted in a directory of its own lead to the host canary"},
	"sys_firmware":       {Control: "files under the host's /sys/firmware read", NA: na("machines without /sys/firmware", shows("this machine has no /sys/firmware"), r, rl)},
	"sysfs_write":        {Control: "uevent_helper, a khugepaged knob or a release_agent opens for writing (nothing written)", NA: anyOf(na("the knobs are root's", shows("only root may write them", "permission denied"), rl), na("machines with none of the knobs", shows("none of these knobs exists on this machine"), r, rl))},
	"sysv_ipc":           {Control: "the host's SysV segment is found by its key"},
	"tiocsti":            {Control: "the attack pushes input into the queue of a pseudo-terminal that is its controlling terminal (the control's own)", NA: na("dev.tty.legacy_tiocsti=0 refuses TIOCSTI to unprivileged processes", shows("dev.tty.legacy_tiocsti=0"), rl)},
	"udp_egress":         {Control: "the test's UDP listener answers on the host's addresses"},
	"umount_masks":       {Control: "a mask of its own (/dev/null bound over a file) is unmounted and the file shows (private mount namespace)"},
	"unshare_ns":         {Control: "children get new namespaces (unprivileged: inside a user namespace of its own)"},
	"userns_regain_caps": {Control: "a new user namespace is created and a tmpfs mounts in it", NA: na("hosts that give unprivileged users no user namespaces", shows("gives unprivileged users no user namespaces"), rl)},
	"workspace_chown":    {Control: "root gives files in a directory of its own to host users 1000, 1001 and 65534 (n-a rootless: no user may)", NA: na("an unprivileged user cannot give files to other users", shows("cannot give files to other users", "chown 1000:1000: operation not permitted"), rl)},
	"workspace_setuid":   {Control: "set-id files are left in a directory of its own (the owner may set the bits)"},
	"write_home":         {Control: "the $HOME canary opens for appending (nothing written)"},
	"write_lower_layer":  {Control: "the image's lower-layer file opens for writing at its host path (nothing written)"},
	"write_root":         {Control: "the image's root directory (its base layer on the host) is writable (access W_OK)"},
}
