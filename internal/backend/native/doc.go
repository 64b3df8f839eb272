// Package native is agentkernel's embedded Linux backend: it runs a
// command in a sandbox made of Linux namespaces, an overlayfs root, cgroup
// limits, dropped capabilities, no_new_privs, Landlock and seccomp, with
// no daemon and no external runtime. The agentkernel binary itself is the
// sandbox's init: /proc/self/exe re-executed in a hidden mode chosen by
// argv[0] ("agentkernel:init", "agentkernel:exec"); main calls IsInit and
// InitMain before anything else.
//
// STATUS: done and tested — root and rootless callers, busybox and host
// images, overlay root, /proc /dev /sys, nested user namespace (root
// inside = the first id of the sandbox's own block of host ids),
// idmapped layers and volumes, cgroups v1 (v2 code path
// untested here), seccomp default / no-ptrace / allowlist, capabilities,
// Landlock, tty, timeouts, signals, keep, GC, concurrency. Speed: see
// bench/README.md ("run /bin/true"). Left: see the end.
//
// # Two ways to build a sandbox
//
// An ephemeral run or a prepared sandbox (warm pools) as root builds the
// sandbox on a locked thread of agentkernel itself (thread_linux.go):
// the thread unshares the namespaces and runs the init's stages below
// (the list in stages_linux.go: the same stages in the same order, each
// placed in the thread or in PID 1's script) itself, the sandbox's PID 1
// is the assembly stub running stubInitScript (stage proc with its masks,
// /dev, /sys, /tmp and /run on the scratch space for the thread to move
// into the root, then idle with SIGCHLD ignored so that orphans are
// reaped), and the
// exec stage is the same stub as in the re-executed design but a child
// of agentkernel, which collects the command's status directly. That
// saves the init's Go runtime start and exit (docs/perf-log.md). For
// the CLI's `run` as root, package prestart makes that thread (its
// namespaces, lo up and PID 1) while the rest of agentkernel is still
// initialising, so that work costs a CLI run no time. On cgroup v1 the
// command's stage moves itself into the sandbox's cgroup (it writes "0"
// to the tasks files it is handed) instead of being migrated there by
// agentkernel: migrating another process may wait for an RCU grace
// period.
// Rootless callers (a multi-threaded process cannot enter a new user
// namespace), persistent sandboxes, arguments too large for the stub and
// architectures without it use the re-executed init described next;
// AGENTKERNEL_REEXEC_INIT=1 forces it.
//
// # Three processes, three stages
//
// A run with the re-executed init involves three processes, each a stage
// with one job:
//
//  1. The parent (Backend.Run, run_linux.go) is agentkernel itself. It
//     turns the Spec into an initConfig, creates the cgroup only when a
//     limit is set, queues the config on a SOCK_SEQPACKET pair *before*
//     starting the init (no round trip), and forks the init with
//     syscall.ForkExec into new mount, PID, network, IPC and UTS
//     namespaces, Pdeathsig=SIGKILL, a session of its own, and on cgroup
//     v2 straight into its cgroup (CLONE_INTO_CGROUP). While the init
//     boots it migrates the init into a v1 cgroup (that write waits for an
//     RCU grace period) and reads or compiles the seccomp
//     program, and sends both facts as the second config message. Then it
//     waits: forwarding signals as a terminal would (deliver: SIGINT and
//     SIGQUIT to the command's whole process group, or typed into its
//     pty as the terminal's characters; others to the command; a second
//     SIGINT, SIGTERM or SIGHUP, or the grace period, kills), enforcing
//     the timeout (SIGKILL to the
//     init ends the PID namespace; the cgroup is the second fence),
//     reading error reports on fd 4 and the command's wait status on
//     fd 3.
//
//  2. The init (initMain, init_linux.go) is PID 1 of the sandbox. When
//     agentkernel runs as root the init is host root in namespaces owned
//     by the host user namespace: that is what lets it mount an overlay of
//     layer directories under a 0700 data dir, mknod the six devices and
//     build everything the sandbox can then not undo. Its stages, in
//     order, each a named method (the list, with where each executor
//     runs each stage, is stages_linux.go):
//     readConfig → awaitIDMaps → makeNamespaces (mounts private) →
//     prepareScratch → mountFreshProc → openCgroups → startExecStage →
//     setupNetwork → mountRootfs → moveProc → mountDev → mountSys →
//     mountTmp → mountVolumes → prepareProcess → pivotRoot →
//     releaseExecStage → supervise.
//     Why this order: nothing is mounted before the mount tree is
//     private. cgroup.procs files are opened while host paths are
//     reachable. A fresh proc is mounted before the exec stage is forked
//     because its uid_map is written through /proc/<pid> and <pid> must be
//     a pid of the new namespace; the same proc mount is later moved (not
//     re-mounted) into the new root. The exec stage is forked as early as
//     possible so that it starts while the init mounts. The per-run tmpfs
//     ("scratch", sized by DiskMB) covers a host directory that holds no
//     layer, only in the init's private mount namespace, and holds the
//     overlay's upper and work dirs and the new root's mount point.
//     pivot_root into the new root and MNT_DETACH of the old one leave no
//     host path nameable. releaseExecStage waits for the parent's second
//     message, moves the exec stage into the v1 cgroup, and hands it its
//     final instructions. supervise reaps every child and exits with the
//     command's status as soon as the command ends; PID 1 exiting makes
//     the kernel kill the rest of the PID namespace, so
//     `sh -c 'sleep 100 & exit 0'` returns at once and leaves nothing.
//
//  3. The exec stage becomes the command. For a root caller it lives in a
//     user namespace of its own that maps 0..65535 to the sandbox's block
//     of host ids (idrange, below; the layers and volumes are idmapped
//     through the same namespace) and that owns *none* of the sandbox's
//     other namespaces: root
//     inside cannot mount, configure the network, set the hostname or
//     remount /proc/sys, whatever capabilities it keeps. In order, on one
//     thread: drop the bounding set to Spec.Security.Capabilities, clear
//     ambient and inheritable capabilities, set groups/gid/uid, capset,
//     chdir, RLIMIT_NOFILE, no_new_privs, Landlock, seccomp, execve. Each
//     of these is per-thread and only the execing thread survives execve,
//     so no TSYNC is needed (the list: execSteps, stages_linux.go). A
//     failed step is reported to the parent as a binary record
//     (stageFailure: exec or set-up, errno, stage, message), which it
//     maps to sandbox.ErrNotFound (exec, ENOENT, 127) or
//     sandbox.ErrCannotInvoke (exec, EACCES, ENOEXEC..., 126).
//
// Why a separate exec stage rather than exec'ing from the init: entering
// a new user namespace resets the capability sets and the bounding set to
// full, and Go's fork/exec can neither drop the bounding set nor install
// seccomp or Landlock between clone and execve.
//
// # The exec stage is a stub, not Go (stub_linux.go)
//
// A second Go runtime start per run costs CPU (page faults, every
// linked package's init; docs/perf-log.md). On amd64 the exec stage is stub/execstub_amd64.S
// (~700 bytes, embedded, run from a sealed memfd made once per process):
// it executes a "syscall
// script" — records of syscall number and arguments, with all pointers
// precomputed for a fixed load address and results of earlier records
// usable as arguments — and reports the index and errno of a failing
// record. Its first script enters the user and cgroup namespaces (so the
// init can fork it with vfork instead of a full fork with CLONE_NEWUSER)
// and waits; the init writes its id maps, and after pivot_root sends the
// second script: the steps above, computed by buildStubScript. When the
// seccomp program allows every later step of the stub whatever its
// arguments (docker's profiles do; filterAllows checks the program),
// a thread-built sandbox's stub loads it in the first script, right
// after entering its namespaces, so that the kernel's work on it
// (BenchmarkLoadSeccomp) overlaps the mounting of the root
// (earlySeccomp). The stub must enter its user namespace before
// pivot_root: while the old root is still stacked on the new one the
// kernel refuses CLONE_NEWUSER as if the process were chrooted. On
// other architectures (and in tests, to keep it covered) the exec stage
// is agentkernel re-executed (execMain / fence in exec_linux.go), cloned
// into its user namespace by Go.
// A prepared sandbox (prepare_linux.go) splits that second script: the
// steps that do not need the command run while it is prepared, and its
// command brings only the stdio, the seccomp filter and the execve
// (buildStubPrepared).
//
// The same stub is a persistent sandbox's PID 1 once the init is done
// (persist_linux.go, pid1IdleScript), and starts every command exec'd
// into it from outside (execJoinScripts: its FORK record forks the
// command into the sandbox's PID namespace).
//
// # PID 1 holds nothing
//
// Whichever way a sandbox is built, its PID 1, once the command's first
// instruction may run, has no capability in any set (bounding included),
// securebits that keep uid 0 from regaining any (locked), no_new_privs
// and a seccomp filter: the stub's script ends with addLockdown and a
// filter that allows only its last few system calls (pid1Filter); a
// re-executed init that stays PID 1 for a run drops everything on every
// thread of its Go runtime and loads the command's own filter
// (lockdown_linux.go). A container scanner reading PID 1's status finds
// nothing to flag; reaping needs no privilege.
//
// # Seccomp and Landlock without their helper libraries' hot paths
//
// Docker's default profile comes from github.com/moby/profiles/seccomp,
// filtered for the capability set like docker does; the BPF is generated
// here (seccomp_linux.go) instead of with github.com/elastic/go-seccomp-bpf:
// its assembler leaves a syscall argument in the accumulator after a
// failed argument check and compares it as a syscall number from then on
// (a rule could be skipped or matched by the wrong syscall), and its arch
// package builds maps for five architectures in an init function that
// every process of a run would pay for. Its syscall tables are kept, as
// generated plain arrays (syscalls_linux_*.go). Landlock uses the raw
// syscalls on the exec thread (landlock_linux.go) rather than
// github.com/landlock-lsm/go-landlock, whose all-threads restrict signals
// every runtime thread; best effort by ABI version, like its BestEffort.
//
// # Rootless
//
// A non-root caller cannot create namespaces owned by the host user
// namespace, so the init itself is cloned with CLONE_NEWUSER as well,
// mapping the caller's uid/gid to 0 (one id), and does its mounts inside
// that namespace (overlay with userxattr, binds of /dev nodes instead of
// mknod). The exec stage then gets no further user namespace. Images with
// files owned by several uids need newuidmap ranges, which are not used
// yet (see below). Cgroup limits need a delegated cgroup; without one the
// run goes on without limits after one warning.
//
// # Root filesystem
//
// Image layers (lowest first in Rootfs.Layers) become overlay lower dirs,
// top first; the upper dir's owner and mode are copied from the top
// layer's root so "/" looks like the image's. The "host" image is a
// bind of a scratch directory holding read-only, nosuid binds of the
// host's /usr, /bin, /sbin, /lib* and /etc (symlinks recreated), with
// /etc/shadow, /etc/gshadow, /etc/sudoers*, /etc/ssh masked. /proc is
// fresh, with runc's masked and read-only paths; /dev is a tmpfs with
// null, zero, full, random, urandom, tty, a private devpts (ptmx 0666),
// /dev/shm and the fd links; /sys is read-only; /tmp and /run are tmpfs
// owned by the sandbox's root. Mount destinations are resolved inside the
// new root (resolveIn), so an image's symlinks cannot point a mount
// outside it. ReadOnlyRoot sets MOUNT_ATTR_RDONLY on "/" after every mount
// point exists.
//
// # Workspace ownership (idmapped mounts)
//
// Host directories bound or overlaid into a root caller's sandbox are
// idmapped (open_tree + mount_setattr(MOUNT_ATTR_IDMAP)) through the
// command's own user namespace, so a file the host sees as uid N appears
// as N inside: the project's owner and root look like themselves and the
// sandbox's root can write a copy-on-write workspace. For copy-on-write
// mounts this is harmless: writes land on the tmpfs upper. For writable
// binds it means the sandbox's root writes files the host sees as owned
// by host root — the same as docker with a bind mount, but we fence it:
// every bind is nosuid and nodev inside, and when a writable idmapped
// bind exists the seccomp filter also refuses chmod/fchmod/fchmodat(2),
// open/openat/creat/mknod(at) with S_ISUID or S_ISGID, openat2 (ENOSYS,
// libc falls back to openat) and the setxattr family (file
// capabilities), so no setuid binary or file capability can be planted
// for the host to run. Read-only binds are idmapped too. Rootless, writable
// binds get the same filter: a set-id file of the caller's uid would run as
// the caller for anyone else who executes it.
//
// # Hostile input
//
// Image symlinks: mount points and the working directory are created
// while the init still sees the host's root, so every destination is
// resolved inside the new root by resolveIn, which follows at most 40
// links (the kernel's budget) and fails beyond that rather than leaving
// the kernel to follow the rest from the host's root. The image's
// /etc/passwd and /etc/group, an existing working directory and the
// root's symlinked entries are opened through the root's descriptor with
// openat2(RESOLVE_IN_ROOT), the kernel's version of the same rule
// (openInRoot; resolveIn where the kernel lacks openat2). Inherited
// descriptors: the init closes every descriptor above fd 4 that
// agentkernel's caller left without close-on-exec before it forks
// anything (runc CVE-2024-21626), and makes itself non-dumpable so that,
// rootless, the command cannot reach PID 1's descriptors or root through
// /proc/1. tmpfs volumes are sized like the writable layer.
//
// # Cgroups
//
// v1 cgroups are made with plain mkdir and writes (newCgroupV1), only
// in the memory, pids and cpu hierarchies: github.com/opencontainers/cgroups'
// fs manager does, on every run's critical path, work a fresh cgroup
// does not need (BenchmarkCgroupNewDestroy measures the difference) (a read of the limit it raises, the CFS
// period at its default, os.File's poller registration per file). v2
// uses the library's fs2 manager; both use its cgroup-file parsing.
// Memory and memory+swap get the same limit: no swap. v1 cgroups live in
// <own cgroup>/agentkernel/<name> for each controller; v2 in
// /sys/fs/cgroup/agentkernel/<name> for root, next to the caller's own
// cgroup when rootless and delegated. The name is
// agentkernel-<data dir tag>-<id> (cgroupName: the tag ties it to the
// data directory whose GC may remove it), agentkernel-<id> without a data
// directory. The memory controller's oom_kill counter, read before the
// cgroup goes, tells the run that the OOM killer ended its processes
// (Result.OOMKills). On v2 the init is
// cloned into the cgroup; on v1 the parent moves it while it boots and the
// init moves the exec stage before releasing it, so no code of the
// command ever runs outside. The cgroup is removed after the run; the PID
// namespace is already dead by then.
//
// cgroup v2 on this hybrid host: memory, pids and cpu are bound to the v1
// hierarchies, so a v2 hierarchy mounted in a test namespace could not
// carry them and a v2 run with limits cannot be exercised here. The v2
// path is opencontainers/cgroups' fs2 manager (runc's), plus
// CLONE_INTO_CGROUP and cgroup.kill; TestMemoryLimit, TestPidsLimit and
// TestCPULimitAndCgroupRemoved are layout-agnostic and are what a pure-v2
// CI host should run to cover it.
//
// # Cleanup and GC
//
// Nothing of an ephemeral run lives in the host's mount namespace: the
// scratch tmpfs, the overlay and every mount die with the init's mount
// namespace. Only --keep (upper dir under DataDir/runs/<id>) and cgroups
// exist outside; a run directory carries a "lock" file flock'ed by the
// owning agentkernel (a lock GC can take means the owner died) and a
// "kept" marker after a kept run. GC removes dead, unkept run dirs, empty
// cgroups of its own data directory's sandboxes older than 30 s (never
// another data directory's) and stray mounts under DataDir/runs.
//
// # Persistent sandboxes (persist_linux.go)
//
// Backend.Boot boots the same sandbox with initConfig.Persistent: the
// boot's exec stage is retired after pivot_root (it existed for the
// idmaps of the layers and volumes), and the init sends the supervisor a
// descriptor of the sandbox's root and the resolved exec template, then
// replaces itself with the stub as the idle, locked-down PID 1. Every
// exec, file operation and stop is done by the supervisor from outside
// the sandbox, as runc exec does: the stub joins the sandbox's cgroup
// and namespaces through PID 1's pidfd, gets its own user namespace
// (mapped by the supervisor) and cgroup namespace, forks into the PID
// namespace and runs the exec stage's steps; the supervisor, a child
// subreaper, adopts and reaps the command. File operations use agent.FS
// on the root descriptor (openat2). The overlay's upper and work dirs
// live on disk in the sandbox's directory, owned by the sandbox's block
// of host ids, which it keeps from its first start to its removal
// (persist_ids_linux.go). A Go process cannot enter another user
// namespace, so persistent sandboxes need the stub (amd64).
//
// # Host ids (idrange)
//
// A root caller's sandbox runs in a block of 65536 host ids of its own
// from systemd's container range (package idrange: flock leases for
// ephemeral sandboxes, reservations for persistent ones), clear of every
// /etc/subuid and /etc/subgid range. The image store keeps layers with
// the image's own ids; the init stacks read-only idmapped clones of them
// (idmappedLayers), shifted by the command's user namespace. Writable
// host directories are idmapped through a namespace of their own in
// which the sandbox's root stands for the invoking user
// (bindns_linux.go).
//
// # Profiling
//
// AGENTKERNEL_TRACE_STAGES=1 in agentkernel's environment makes the parent
// and the init print a CLOCK_MONOTONIC timestamp (ms) after each stage to
// stderr, so one run's time line can be read across processes; the CLI
// adds its own start-up ("front: ..."). bench/cmd/stagetrace runs a
// command many times that way and prints each stage's median offset from
// the fork and its median step.
//
// # What is left
//
//   - Speed: a CLI run of a cached image takes longer than bwrap's and
//     uses more CPU (bench/README.md, "run /bin/true", has the current
//     ratio of the static build the README makes); with both CPUs busy,
//     only less work makes it faster. What
//     remains: the Go process itself (start-up, page faults, its exit),
//     the namespaces, two forks of the stub, v1 cgroups in three
//     hierarchies, the mounts.
//   - Rootless runs map one uid; newuidmap/newgidmap with /etc/subuid
//     ranges are not used yet, so multi-uid images show unmapped files.
//   - Persistent sandboxes need the stub, built for amd64 only.
//   - A run's tty (run -t) comes from the host's devpts (the command's
//     ttyname fails; isatty, stty and the window size work). A
//     persistent sandbox's exec -t and attach get theirs from the
//     sandbox's own devpts (ptybridge_linux.go), bridged to the caller's.
//   - DiskMB is not enforced for --keep (the upper dir is on disk).
//   - The stub exists for amd64 only; arm64 uses the Go exec stage.
package native
